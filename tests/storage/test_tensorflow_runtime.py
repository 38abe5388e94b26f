"""TensorFlow as bert_jax imports it: without Keras 3's scikit-learn and matplotlib extras
(which bert_jax never uses through Keras), and with both importable afterwards."""

import subprocess
import sys

from tests.conftest import ROOT


def test_tensorflow_is_imported_without_keras_extras_which_stay_importable() -> None:
    code = (
        "import sys\n"
        "from bert_jax.storage import tensorflow_runtime\n"
        "tf = tensorflow_runtime.tensorflow()\n"
        "assert tf.constant(2).numpy() == 2 and 'keras' in sys.modules\n"
        "assert not {'sklearn', 'matplotlib'} & set(sys.modules), sorted(sys.modules)\n"
        "import matplotlib, sklearn\n"  # afterwards, as bert_jax's figures and users need them
        "assert sys.modules['matplotlib'] is matplotlib and sklearn.__version__\n"
        "tensorflow_runtime.tensorflow_text()\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_extras_imported_before_tensorflow_are_left_alone() -> None:
    code = (
        "import sys, matplotlib\n"
        "from bert_jax.storage import tensorflow_runtime\n"
        "tensorflow_runtime.tensorflow()\n"
        "assert sys.modules['matplotlib'] is matplotlib and 'sklearn' not in sys.modules\n"
        "import keras.src.visualization.plot_image_gallery as gallery\n"
        "assert gallery.plt is not None\n"  # Keras saw the matplotlib already there
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
