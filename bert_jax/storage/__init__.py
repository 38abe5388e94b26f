"""Files and the runtime beneath them: atomic writes, and TensorFlow imported quietly (for
`tf.io.gfile`, TFRecords, tensorflow-text)."""
