"""GPU state of this machine via NVML (probe ``gpu``, local) and via a DCGM exporter (``gpu_metrics``).

NVML is read through a small reader seam (`NvmlReader`): `PynvmlReader`
calls the real library; `RecordedNvml` replays readings recorded as JSON, so
the checks can be tested where no GPU is present. Utilisation is sampled
several times over about a second, because one NVML reading is a short
window and a single sample can miss a busy or an idle spell.

The DCGM exporter (``--gpu-metrics-url``) gives the same facts for a server
that is not this machine; both probes return a `GpuSnapshot`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from llmdoctor.probes.catalog import GPU, GPU_METRICS
from llmdoctor.probes.contract import AnyProbe

if TYPE_CHECKING:
    from llmdoctor.context import Context

__all__ = [
    "GpuProcess",
    "GpuReading",
    "GpuSnapshot",
    "NvmlReader",
    "PynvmlReader",
    "RecordedNvml",
    "THROTTLE_REASONS",
    "ANY_GPU",
    "any_gpu",
    "gpu",
    "gpu_metrics",
    "parse_dcgm",
    "read_gpus",
]

# Clock event (throttle) reason bits, as defined by nvml.h / nvidia-ml-py (nvmlClocksEventReason*).
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


@dataclass
class GpuProcess:
    """A process holding GPU memory."""

    pid: int
    used_bytes: int | None = None
    name: str = ""


@dataclass
class GpuReading:
    """One GPU's state; fields a source cannot give are None."""

    index: int
    name: str = ""
    uuid: str = ""
    util_samples: list[float] = field(default_factory=list)
    memory_util_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: list[str] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)
    ecc_uncorrected: int | None = None
    xid_last: int | None = None

    @property
    def util_mean(self) -> float | None:
        """Mean utilisation over the samples, in percent."""
        return sum(self.util_samples) / len(self.util_samples) if self.util_samples else None

    @property
    def util_min(self) -> float | None:
        """Lowest utilisation sample, in percent."""
        return min(self.util_samples) if self.util_samples else None

    @property
    def memory_fraction(self) -> float | None:
        """Used / total memory (0..1)."""
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes


@dataclass
class GpuSnapshot:
    """All GPUs seen by one source (``nvml`` or ``dcgm``)."""

    source: str
    gpus: list[GpuReading] = field(default_factory=list)
    driver_version: str = ""
    sample_window_ms: float = 0.0
    note: str = ""


class NvmlReader(Protocol):
    """The NVML calls the probe needs; one implementation per source of readings."""

    def init(self) -> None: ...
    def driver_version(self) -> str: ...
    def device_count(self) -> int: ...
    def static(self, index: int) -> dict[str, Any]: ...
    def utilization(self, index: int) -> tuple[float, float]: ...
    def shutdown(self) -> None: ...


class PynvmlReader:
    """Reads the real NVML through nvidia-ml-py (imported on first use)."""

    def __init__(self) -> None:
        import pynvml

        self.nv = pynvml

    def init(self) -> None:
        self.nv.nvmlInit()

    def shutdown(self) -> None:
        self.nv.nvmlShutdown()

    def driver_version(self) -> str:
        return _text(self.nv.nvmlSystemGetDriverVersion())

    def device_count(self) -> int:
        return int(self.nv.nvmlDeviceGetCount())

    def utilization(self, index: int) -> tuple[float, float]:
        rates = self.nv.nvmlDeviceGetUtilizationRates(self.nv.nvmlDeviceGetHandleByIndex(index))
        return float(rates.gpu), float(rates.memory)

    def static(self, index: int) -> dict[str, Any]:
        nv, h = self.nv, self.nv.nvmlDeviceGetHandleByIndex(index)
        out: dict[str, Any] = {"name": _text(nv.nvmlDeviceGetName(h)), "uuid": _text(nv.nvmlDeviceGetUUID(h))}
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        out["memory"] = {"total": int(mem.total), "used": int(mem.used), "free": int(mem.free)}
        optional: dict[str, Callable[[], Any]] = {
            "temperature_c": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "power_mw": lambda: nv.nvmlDeviceGetPowerUsage(h),
            "power_limit_mw": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h),
            "clocks_event_reasons": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
            "ecc_uncorrected_volatile": lambda: nv.nvmlDeviceGetTotalEccErrors(
                h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
            ),
            "processes": lambda: [
                {"pid": int(p.pid), "usedGpuMemory": p.usedGpuMemory}
                for p in nv.nvmlDeviceGetComputeRunningProcesses(h)
            ],
        }
        for key, call in optional.items():
            try:
                out[key] = call()
            except nv.NVMLError:  # not supported on this board / driver: leave it absent
                pass
        return out


class RecordedNvml:
    """Replays NVML readings recorded as JSON (see ``fixtures/nvml/``)."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.rec = recording
        self._calls: dict[int, int] = {}

    def init(self) -> None:
        if self.rec.get("init_error"):
            raise RuntimeError(self.rec["init_error"])

    def shutdown(self) -> None:
        pass

    def driver_version(self) -> str:
        return str(self.rec.get("driver_version", ""))

    def device_count(self) -> int:
        return len(self.rec["devices"])

    def static(self, index: int) -> dict[str, Any]:
        return self.rec["devices"][index]

    def utilization(self, index: int) -> tuple[float, float]:
        samples = self.rec["devices"][index]["utilization_samples"]
        n = self._calls.get(index, 0)
        self._calls[index] = n + 1
        sample = samples[n % len(samples)]
        return float(sample["gpu"]), float(sample["memory"])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _reasons(mask: int | None) -> list[str]:
    if not mask:
        return []
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def read_gpus(
    reader: NvmlReader, samples: int = 5, interval_s: float = 0.2, sleep: Callable[[float], None] = time.sleep
) -> GpuSnapshot:
    """Read every GPU once and sample utilisation `samples` times, `interval_s` apart."""
    reader.init()
    try:
        count = reader.device_count()
        gpus = []
        for i in range(count):
            s = reader.static(i)
            mem = s.get("memory") or {}
            power, limit = s.get("power_mw"), s.get("power_limit_mw")
            gpus.append(
                GpuReading(
                    index=i,
                    name=str(s.get("name", "")),
                    uuid=str(s.get("uuid", "")),
                    memory_used_bytes=mem.get("used"),
                    memory_total_bytes=mem.get("total"),
                    temperature_c=s.get("temperature_c"),
                    power_w=None if power is None else power / 1000,
                    power_limit_w=None if limit is None else limit / 1000,
                    throttle_reasons=_reasons(s.get("clocks_event_reasons")),
                    ecc_uncorrected=s.get("ecc_uncorrected_volatile"),
                    processes=[
                        GpuProcess(pid=int(p["pid"]), used_bytes=p.get("usedGpuMemory"))
                        for p in s.get("processes") or []
                    ],
                )
            )
        started = time.perf_counter()
        mem_util: dict[int, list[float]] = {}
        for n in range(samples):
            if n:
                sleep(interval_s)
            for g in gpus:
                util, mutil = reader.utilization(g.index)
                g.util_samples.append(util)
                mem_util.setdefault(g.index, []).append(mutil)
        for g in gpus:
            values = mem_util.get(g.index) or []
            g.memory_util_pct = sum(values) / len(values) if values else None
        window = (time.perf_counter() - started) * 1000
        return GpuSnapshot(source="nvml", gpus=gpus, driver_version=reader.driver_version(),
                           sample_window_ms=window)
    finally:
        reader.shutdown()


def gpu(ctx: Context) -> GpuSnapshot:
    """Probe: the GPUs of this machine through NVML; unavailable with NVML's reason."""
    from llmdoctor.context import ProbeUnavailable

    try:
        reader = PynvmlReader()
    except ImportError:
        raise ProbeUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
    try:
        snapshot = read_gpus(reader)
    except reader.nv.NVMLError as exc:
        raise ProbeUnavailable(f"no NVIDIA driver: {exc}") from None
    if not snapshot.gpus:
        raise ProbeUnavailable("NVML found no GPU on this machine")
    return snapshot


# -- DCGM exporter ------------------------------------------------------------------------------
_MIB = 1024 * 1024


def parse_dcgm(text: str) -> GpuSnapshot:
    """GPUs from a DCGM exporter's ``/metrics`` text (values per ``gpu`` label)."""
    from llmdoctor.probes.metrics import parse_samples

    samples = parse_samples(text)
    gpus: dict[str, GpuReading] = {}

    def reading(labels: dict[str, str]) -> GpuReading | None:
        key = labels.get("gpu")
        if key is None:
            return None
        if key not in gpus:
            gpus[key] = GpuReading(index=int(key) if key.isdigit() else len(gpus),
                                   name=labels.get("modelName", ""), uuid=labels.get("UUID", ""))
        return gpus[key]

    def each(name: str) -> list[tuple[GpuReading, float]]:
        out = []
        for labels, value in samples.get(name, []):
            r = reading(labels)
            if r is not None:
                out.append((r, value))
        return out

    used: dict[int, float] = {}
    free: dict[int, float] = {}
    for r, v in each("DCGM_FI_DEV_GPU_UTIL"):
        r.util_samples.append(v)
    for r, v in each("DCGM_FI_DEV_MEM_COPY_UTIL"):
        r.memory_util_pct = v
    for r, v in each("DCGM_FI_DEV_FB_USED"):
        used[r.index] = v
        r.memory_used_bytes = int(v * _MIB)
    for r, v in each("DCGM_FI_DEV_FB_FREE"):
        free[r.index] = v
    for r, v in each("DCGM_FI_DEV_FB_TOTAL"):
        r.memory_total_bytes = int(v * _MIB)
    for r, v in each("DCGM_FI_DEV_GPU_TEMP"):
        r.temperature_c = v
    for r, v in each("DCGM_FI_DEV_POWER_USAGE"):
        r.power_w = v
    for r, v in each("DCGM_FI_DEV_POWER_MGMT_LIMIT"):
        r.power_limit_w = v
    for r, v in each("DCGM_FI_DEV_XID_ERRORS"):
        r.xid_last = int(v)
    for r, v in each("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"):
        r.throttle_reasons = _reasons(int(v))
    for r in gpus.values():
        if r.memory_total_bytes is None and r.index in used and r.index in free:
            r.memory_total_bytes = int((used[r.index] + free[r.index]) * _MIB)
    return GpuSnapshot(source="dcgm", gpus=sorted(gpus.values(), key=lambda g: g.index))


def gpu_metrics(ctx: Context) -> GpuSnapshot:
    """Probe: GPUs of the serving host from its DCGM exporter (``--gpu-metrics-url``)."""
    from llmdoctor.context import ProbeUnavailable
    from llmdoctor.probes.metrics import fetch_text

    url = ctx.options.evidence.gpu_metrics_url
    if not url:
        raise ProbeUnavailable(GPU_METRICS.off_reason(ctx.options) or "no --gpu-metrics-url given")
    text = fetch_text(ctx, url)
    if text is None:
        raise ProbeUnavailable(f"GET {url} failed")
    try:
        snapshot = parse_dcgm(text)
    except ValueError as exc:
        raise ProbeUnavailable(f"{url}: {exc}") from None
    if not snapshot.gpus:
        raise ProbeUnavailable(f"{url} has no DCGM_FI_DEV_* series with a gpu label")
    return snapshot


#: The probes `any_gpu` reads (a check using it declares them optional).
ANY_GPU: tuple[AnyProbe, ...] = (GPU, GPU_METRICS)


def any_gpu(ctx: Context) -> GpuSnapshot:
    """The local NVML snapshot, else the DCGM one; ProbeUnavailable naming both reasons."""
    from llmdoctor.context import ProbeUnavailable

    reasons = []
    for probe in (GPU, GPU_METRICS):
        try:
            return ctx.get(probe)
        except ProbeUnavailable as exc:
            reasons.append(f"{probe.name}: {exc.reason}")
    raise ProbeUnavailable("no GPU readings (" + "; ".join(reasons) + ")")
