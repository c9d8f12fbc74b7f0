"""Every operator of PyTorch's own OpInfo database (torch.testing._internal, the samples its
test suite runs), forward and backward, recorded on one stream on the CPU stand-in: a program
on one stream has no race, so any race is the recorder's error, and an operator the recorder
chokes on shows as an internal error. Skipped where the database does not import (it needs
numpy and expecttest), except under python/test.sh, which installs them and requires it."""

import collections
import os
import warnings

import pytest
import torch

import streamsan.torch as st
from streamsan.torch._device import CpuStandIn

try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
except Exception as e:  # pragma: no cover - depends on the environment
    op_db = None
    why = f"torch's OpInfo database does not import here: {e!r}"

DTYPES = (torch.float32, torch.int64, torch.complex64, torch.bool)
# A tensor whose storage PyTorch has invalidated (seen in sgn's backward): its bytes cannot be
# read, so the recorder keeps it as an internal error and goes on.
KNOWN = ("invalid python storage",)


def test_every_op_db_sample_on_one_stream_is_clean(native, tmp_path):
    if op_db is None:
        if os.environ.get("STREAMSAN_REQUIRE_OP_DB") == "1":  # python/test.sh (CI) sets it
            pytest.fail(why)
        pytest.skip(why)
    session = native.Session(report=os.devnull, api="torch")
    h = st.enable(_session=session, _device=CpuStandIn())
    rec = h.recorder
    ran = 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for op in op_db:
                for dtype in DTYPES:
                    if dtype not in op.supported_dtypes("cpu"):
                        continue
                    grad = dtype == torch.float32 and op.supports_autograd
                    try:
                        samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))
                    except Exception:
                        continue
                    for s in samples:
                        try:
                            out = op(s.input, *s.args, **s.kwargs)
                        except Exception:
                            continue  # the sample is meant to fail (or fails without streamsan too)
                        ran += 1
                        outs = out if isinstance(out, (tuple, list)) else [out]
                        # Device outputs only: an output a non-blocking copy put in pinned
                        # memory is read by the host below, which is a race by the rules.
                        diff = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad
                                and o.is_floating_point() and rec.is_device(o)]
                        if grad and diff:
                            try:
                                torch.autograd.backward([o.sum() for o in diff])
                            except Exception:
                                pass
    finally:
        st.disable()
    assert ran > 10000, ran
    assert h.races == 0, h.report_text()[:4000]
    kinds = collections.Counter(str(e) for _where, e in rec.internal_errors)
    unknown = {k: n for k, n in kinds.items() if not any(m in k for m in KNOWN)}
    assert not unknown, unknown
