"""TensorFlow as bert_jax imports it: without Keras 3's scikit-learn and matplotlib extras
(which bert_jax never uses through Keras), and with both importable afterwards."""

import os
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


def test_import_and_hidden_devices_print_nothing_under_a_users_log_level() -> None:
    # TF_CPP_MIN_LOG_LEVEL=2 lets ERROR lines through, and hiding TensorFlow's devices logs
    # CUDA's failed probe at ERROR level on a machine without a GPU.
    code = (
        "from bert_jax.storage import tensorflow_runtime\ntensorflow_runtime.tensorflow_text()\nprint('ok')\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("BERT_JAX_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[-3000:]
