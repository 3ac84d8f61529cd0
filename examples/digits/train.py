"""Train the embedded digits example: scikit-learn's 8x8 handwritten digits (1,797 images,
10 classes; the UCI optical digits test set, shipped inside scikit-learn), pixels scaled from
0..16 to [0, 1], a 64-64-64-10 ReLU network trained to be globally robust at l2 radius
EPS (in [0, 1] pixel units). Writes model.onnx (Flatten + Gemm, as PyTorch's TorchScript
exporter emits), x_test.npy (float32 [N, 1, 8, 8]) and y_test.npy (int64 [N]) next to this file.

    pip install -r ../requirements.txt && python train.py
"""

import os
import sys

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "common"))
import gloro  # noqa: E402

EPS = 0.3
TRAIN_EPS = 0.45

here = os.path.dirname(os.path.abspath(__file__))
digits = load_digits()
x = (digits.images / 16.0).astype(np.float32)
y = digits.target.astype(np.int64)
x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)

params = gloro.train(x_train.reshape(len(x_train), -1), y_train, [64, 64, 64, 10], TRAIN_EPS, epochs=400, lr=2e-3)
acc, vra = gloro.real_vra(params, x_test.reshape(len(x_test), -1), y_test, EPS)
print(f"test accuracy {acc:.4f}, real-arithmetic VRA at eps {EPS}: {vra:.4f} (estimate)")

gloro.export_flatten_gemm(params, [1, 8, 8], os.path.join(here, "model.onnx"), "digits_gloro")
np.save(os.path.join(here, "x_test.npy"), x_test.reshape(-1, 1, 8, 8))
np.save(os.path.join(here, "y_test.npy"), y_test)
