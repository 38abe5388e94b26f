"""Test set-up shared by every test module."""

import os
import sys
from pathlib import Path

# Tests run on the CPU (one device in this process; sharding tests start subprocesses with
# 8 virtual devices). Set before JAX is imported anywhere.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # the plan tests load libtpu twice

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # so `configs` and `bench` import as packages
