"""Train the embedded breast-cancer example: scikit-learn's Wisconsin diagnostic breast cancer
table (569 rows, 30 features, 2 classes; shipped inside scikit-learn), features standardised
with the training split's mean and standard deviation, a 30-32-32-2 ReLU network trained to be
globally robust at l2 radius EPS (in standardised units). Writes model.onnx (Reshape + MatMul +
Add, as tf2onnx emits), x_test.npy (float32 [N, 30], already standardised) and y_test.npy
(uint8 [N]: 0 malignant, 1 benign) next to this file.

    pip install -r ../requirements.txt && python train.py
"""

import os
import sys

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "common"))
import gloro  # noqa: E402

EPS = 0.25
TRAIN_EPS = 0.4

here = os.path.dirname(os.path.abspath(__file__))
data = load_breast_cancer()
x_train, x_test, y_train, y_test = train_test_split(
    data.data, data.target, test_size=0.3, random_state=0, stratify=data.target
)
mean, std = x_train.mean(0), x_train.std(0)
x_train = ((x_train - mean) / std).astype(np.float32)
x_test = ((x_test - mean) / std).astype(np.float32)

params = gloro.train(x_train, y_train.astype(np.int64), [30, 32, 32, 2], TRAIN_EPS, epochs=300, lr=2e-3, batch=32)
acc, vra = gloro.real_vra(params, x_test, y_test, EPS)
print(f"test accuracy {acc:.4f}, real-arithmetic VRA at eps {EPS}: {vra:.4f} (estimate)")

gloro.export_reshape_matmul_add(params, 30, os.path.join(here, "model.onnx"), "breast_cancer_gloro")
np.save(os.path.join(here, "x_test.npy"), x_test)
np.save(os.path.join(here, "y_test.npy"), y_test.astype(np.uint8))
