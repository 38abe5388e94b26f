"""Files and the runtime beneath them: one path layer for local folders and buckets (one
``gs://`` client, one retry policy), atomic writes, and TensorFlow imported quietly (for
TFRecords, TFDS, tensorflow-text)."""
