"""Batch-1 inference for actors: the device a worker acts on, a CUDA-graph step, int8 weights.

A worker decides one observation at a time, so a policy step is short and its fixed costs
(Python, op dispatch, kernel launches, weights streamed from memory) dominate. What this module
offers an actor (``rulka.agents.iqn.actor`` uses it):

- ``resolve_device``: ``worker.device`` (``auto | cpu | cuda | cuda:N``) to a torch device, with
  a one-line ``ConfigError`` naming the key when a named GPU is not there.
- ``GraphStep``: a function of fixed-shape tensors captured once as a CUDA graph (under fp16
  autocast when asked) and replayed per call. The graph reads the module's parameters where
  they live, so new weights loaded with ``load_state_dict`` (which copies into the existing
  tensors) are used by the next replay: no re-capture and no new allocation per weights version.
  Autocast's weight cache is off while capturing, so the fp16 casts are part of the graph and
  re-read the fp32 parameters at each replay.
- ``int8_linears``: a copy of a module whose ``nn.Linear`` layers run with int8 weights and
  dynamically quantised activations (fbgemm/oneDNN), for CPUs; the caller checks its argmax
  against float32 (it is not exact).
- ``OrtStep``: a module's forward exported to ONNX in memory (from the module itself: nothing is
  read from a file) and run by ONNX Runtime on one CPU thread (``worker.cpu_runtime``, the
  optional ``rulka[onnx]`` extra), with ``int8`` its matrix products in int8 (``ort_int8``);
  ``onnxruntime_missing`` says why it cannot run here.
"""

from __future__ import annotations

import copy
import io
import logging
import re
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from rulka.errors import ConfigError

log = logging.getLogger(__name__)

DEVICE_PATTERN = r"auto|cpu|cuda(:\d+)?"


def resolve_device(setting: str, key: str = "worker.device") -> torch.device:
    """``auto`` (cuda where torch sees a GPU, else cpu), ``cpu``, ``cuda`` or ``cuda:N`` as a torch
    device; a named GPU that torch cannot see raises ``ConfigError`` naming ``key``."""
    if not re.fullmatch(DEVICE_PATTERN, setting):
        raise ConfigError(f"config key `{key}` must be auto, cpu, cuda or cuda:N, got {setting!r}")
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if setting.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"config key `{key}` is {setting} but torch sees no CUDA device on this machine "
                              "(set it to auto or cpu, or install a CUDA build of torch)")
        index = setting.partition(":")[2]
        if index and int(index) >= torch.cuda.device_count():
            raise ConfigError(f"config key `{key}` is {setting} but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return torch.device(setting)


class GraphStep:
    """``fn(*inputs)`` on fixed-shape CUDA tensors, captured once as a CUDA graph.

    ``inputs`` are the example tensors (their shapes and dtypes are fixed from then on); each
    call copies new values into the static copies, replays the graph and returns the static
    output (a view that the next call overwrites: copy what you keep). ``half``: fp16 autocast.
    """

    def __init__(self, fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor], half: bool = True,
                 warmup: int = 3) -> None:
        self.fn, self.half = fn, half
        self.static = [t.clone() for t in inputs]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.inference_mode():  # warm-up (cuDNN/cuBLAS plans) off the capture
            for _ in range(warmup):
                self._run()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(self.graph):
            self.out = self._run()
        self.replays = 0

    def _run(self) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.half, cache_enabled=False):
            return self.fn(*self.static).float()

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        for dst, src in zip(self.static, inputs):
            dst.copy_(src, non_blocking=True)
        self.graph.replay()
        self.replays += 1
        return self.out


def int8_linears(module: nn.Module) -> nn.Module:
    """A copy of ``module`` (eval mode) whose ``nn.Linear`` layers hold int8 weights (one scale per
    output row) and quantise their input per call (torch's dynamic quantisation). Convolutions
    and everything else stay float32."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch marks the eager quantisation API deprecated; it is what runs here
        warnings.simplefilter("ignore")
        return quantize_dynamic(copy.deepcopy(module).eval(), {nn.Linear: per_channel_dynamic_qconfig})


def onnxruntime_missing() -> str | None:
    """Why ``OrtStep`` cannot run on this machine (None: it can): ONNX Runtime runs the graph and
    the ``onnx`` package is what torch's exporter writes it with (``pip install rulka[onnx]``)."""
    missing = []
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        missing.append("onnxruntime")
    try:
        import onnx  # noqa: F401
    except ImportError:
        missing.append("onnx")
    return f"{' and '.join(missing)} not installed (pip install 'rulka[onnx]')" if missing else None


class _DropPreprocessAdvice(logging.Filter):
    """ONNX Runtime's quantiser advises pre-processing on the root logger at every call; the graphs
    quantised here are small exports of our own modules, already constant-folded."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def ort_int8(model: bytes) -> bytes:
    """``model`` (ONNX) with the weights of its matrix products in int8, one scale per output
    channel, and their inputs quantised per call (ONNX Runtime's dynamic quantisation, the
    counterpart of ``int8_linears``). The quantiser writes a file: it goes to a temporary folder
    of its own, read back and removed."""
    import tempfile
    from pathlib import Path

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    advice = _DropPreprocessAdvice()
    root = logging.getLogger()
    root.addFilter(advice)
    try:
        with tempfile.TemporaryDirectory(prefix="rulka-int8-") as tmp:
            out = Path(tmp) / "int8.onnx"
            quantize_dynamic(onnx.load_from_string(model), out, op_types_to_quantize=["MatMul", "Gemm"],
                             per_channel=True, weight_type=QuantType.QInt8)
            return out.read_bytes()
    finally:
        root.removeFilter(advice)


def export_onnx(module: nn.Module, inputs: Sequence[torch.Tensor]) -> bytes:
    """``module(*inputs)`` as an ONNX model, in memory, with the inputs' shapes fixed and named
    ``in0``, ``in1``, ..."""
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():  # the TorchScript exporter: deprecated, and fast
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), tuple(inputs), buf, dynamo=False,
                          input_names=[f"in{i}" for i in range(len(inputs))], do_constant_folding=True)
    return buf.getvalue()


class OrtStep:
    """``module(*inputs)`` exported to ONNX (``export_onnx``) and run by ONNX Runtime with one
    thread. ``__call__`` takes numpy arrays of the example inputs' shapes and dtypes and returns the
    first output as float32 numpy. The weights are constants of the graph: new weights need a new
    ``OrtStep``. ``int8``: its matrix products in int8 (``ort_int8``; not exact: the caller checks
    what it decides); ``float_and_int8`` makes both from one export."""

    def __init__(self, module: nn.Module, inputs: Sequence[torch.Tensor], threads: int = 1, int8: bool = False) -> None:
        model = export_onnx(module, inputs)
        self._start(ort_int8(model) if int8 else model, len(inputs), threads)

    @classmethod
    def float_and_int8(cls, module: nn.Module, inputs: Sequence[torch.Tensor], threads: int = 1
                       ) -> tuple[OrtStep, OrtStep]:
        """(float32, int8) steps of ``module`` from one export."""
        model = export_onnx(module, inputs)
        steps = cls.__new__(cls), cls.__new__(cls)
        steps[0]._start(model, len(inputs), threads)
        steps[1]._start(ort_int8(model), len(inputs), threads)
        return steps

    def _start(self, model: bytes, n_inputs: int, threads: int) -> None:
        import onnxruntime as ort

        self.names = [f"in{i}" for i in range(n_inputs)]
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        self.bytes = len(model)

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        out = self.session.run(None, dict(zip(self.names, arrays)))[0]
        return np.asarray(out, dtype=np.float32)
