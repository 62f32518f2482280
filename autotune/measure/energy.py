"""Energy per launch from NVML (nvidia-ml-py): read only, never a made-up zero.

NVML's total-energy counter (millijoules since the driver loaded) moves in coarse steps: on the H200 about
every 100 ms, ~46 J at a time, and one read costs ~4 ms (/work/shared/GPU.md). Reading it once before and
once after a batch would be off by up to one step at each end, so :class:`EnergyMeter` instead watches the
counter from a background thread while a batch of back-to-back launches runs, notes the moments it changes,
and takes the average power between the first and the last change seen inside the batch. That power times
the batch's wall time over its launches is the energy per launch. The batch lasts at least
``EnergyPlan.seconds`` (several counter steps) and doubles until the counter has moved enough.

Where the counter is missing, the same thread samples the power reading (milliwatts) and averages it: the
method is then "nvml-power-sampling", coarser since NVML smooths that reading. Where NVML itself is missing
(no nvidia-ml-py, no driver, no device handle), nothing is measured: :meth:`EnergyMeter.measure` returns
None and :attr:`EnergyMeter.reason` says why.

Energy is measured with a hot L2: the launches of a batch run back to back without flushing the cache in
between. NVML counts the whole card, so a flush kernel between launches would add its own energy (a write of
twice the L2) to every launch, with no way to separate it; a kernel called repeatedly in a program also
finds part of its data in L2. For working sets far above the L2 (the 4096^3 fp32 GEMM's 192 MB) this is
immaterial; for small ones it understates the DRAM energy of a cold call.

Read only: this module never sets clocks, application clocks, power limits or any other state of the GPU.
pynvml is imported only when a meter is first used, so ``import autotune`` does not need it.
"""

from __future__ import annotations

import functools
import math
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

COUNTER = "nvml-counter"
POWER_SAMPLING = "nvml-power-sampling"
INSTALL = "pip install nvidia-ml-py"


@dataclass(frozen=True)
class Energy:
    """One measurement: energy per launch (J), over ``launches`` launches in ``seconds`` of wall time."""

    joules_per_launch: float
    launches: int
    seconds: float
    method: str  # COUNTER or POWER_SAMPLING
    watts: float | None = None  # average power of the card while the batch ran

    def gflops_per_joule(self, flops: float) -> float:
        return flops / 1e9 / self.joules_per_launch


@dataclass(frozen=True)
class EnergyPlan:
    """How long a batch runs: at least ``seconds``, doubled until the counter moved ``min_steps`` times
    (or ``min_samples`` power readings fell inside it), at most ``max_seconds``."""

    seconds: float = 1.0
    max_seconds: float = 4.0
    min_steps: int = 4  # counter changes inside the batch, first to last
    min_span: float = 0.5  # ... spanning at least this fraction of the batch
    min_samples: int = 10  # power readings inside the batch (fallback)
    poll_s: float = 0.002  # pause between reads; a read itself takes ~4 ms on the H200


class _Poller(threading.Thread):
    """Reads ``read()`` until stopped; each sample is (time at the middle of the read, value)."""

    def __init__(self, read: Callable[[], float], poll_s: float, clock: Callable[[], float]) -> None:
        super().__init__(daemon=True, name="autotune-energy-poller")
        self._read, self._poll, self._clock = read, poll_s, clock
        self._stop_event = threading.Event()
        self.samples: list[tuple[float, float]] = []
        self.error: str | None = None

    def run(self) -> None:
        while not self._stop_event.is_set():
            t0 = self._clock()
            try:
                v = float(self._read())
            except Exception as exc:  # noqa: BLE001 - an NVML error mid-batch makes this measurement void
                self.error = f"{type(exc).__name__}: {exc}"
                return
            self.samples.append(((t0 + self._clock()) / 2, v))
            self._stop_event.wait(self._poll)

    def stop(self) -> list[tuple[float, float]]:
        self._stop_event.set()
        self.join()
        return self.samples


def counter_power(samples: list[tuple[float, float]], start: float, end: float, plan: EnergyPlan) -> float | None:
    """Average power (W) between the first and last change of a mJ counter inside [start, end], or None
    when it changed fewer than ``plan.min_steps`` times or over too short a part of the batch.

    A change is dated at the middle between the read that still saw the old value and the one that saw the
    new value, so the energy between two changes belongs to exactly the time between them.
    """
    changes = [
        ((t0 + t1) / 2, v1)
        for (t0, v0), (t1, v1) in zip(samples, samples[1:], strict=False)
        if v1 != v0 and t0 >= start and t1 <= end
    ]
    if len(changes) < plan.min_steps + 1:
        return None
    (ta, ea), (tb, eb) = changes[0], changes[-1]
    if tb - ta < plan.min_span * (end - start) or tb <= ta:
        return None
    return (eb - ea) / 1e3 / (tb - ta)


def sampled_power(samples: list[tuple[float, float]], start: float, end: float, plan: EnergyPlan) -> float | None:
    """Mean of the power readings (mW) taken inside [start, end], in W; None with too few of them."""
    inside = [v for t, v in samples if start <= t <= end]
    if len(inside) < plan.min_samples:
        return None
    return sum(inside) / len(inside) / 1e3


class EnergyMeter:
    """Energy per launch of one GPU, from NVML. Opens NVML on first use; :attr:`available` and
    :attr:`reason` say whether it can measure and why not.

    Example::

        meter = EnergyMeter()            # the current CUDA device, matched to NVML by PCI bus id
        e = meter.measure(run, median_ms=3.0)
        print(e.joules_per_launch if e else f"not measured: {meter.reason}")
    """

    def __init__(
        self,
        device: int | None = None,
        *,
        pci_bus_id: str | None = None,
        sync: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._device, self._pci, self._sync, self._clock = device, pci_bus_id, sync, clock
        self._nvml: Any = None
        self._handle: Any = None
        self._opened = False
        self.method: str | None = None
        self.reason: str | None = None  # why the last measurement (or opening NVML) gave nothing

    # --- opening ---------------------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        self._open()
        return self.method is not None

    def _open(self) -> None:
        if self._opened:
            return
        self._opened = True
        try:
            import pynvml
        except ImportError:
            self.reason = f"NVML is not available: the package nvidia-ml-py is not installed ({INSTALL})"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.reason = f"NVML is not available: nvmlInit failed ({exc})"
            return
        self._nvml = pynvml
        try:
            bus_id = self._pci or self._cuda_pci_bus_id()
        except Exception as exc:  # noqa: BLE001 - no CUDA device: nothing to measure
            self.reason = f"cannot tell which GPU to measure ({type(exc).__name__}: {exc})"
            return
        self._handle = handle_by_bus_id(pynvml, bus_id)
        if self._handle is None:
            self.reason = f"NVML has no device with PCI bus id {bus_id}"
            return
        problems = []
        for method, read in ((COUNTER, self._read_counter), (POWER_SAMPLING, self._read_power)):
            try:
                read()
            except pynvml.NVMLError as exc:
                problems.append(f"{method}: {exc}")
                continue
            self.method = method
            break
        if self.method is None:
            self.reason = (
                "NVML reads neither the energy counter nor the power of this GPU (" + "; ".join(problems) + ")"
            )

    def _cuda_pci_bus_id(self) -> str:
        import cupy

        dev = cupy.cuda.Device(self._device) if self._device is not None else cupy.cuda.Device()
        return dev.pci_bus_id

    def _read_counter(self) -> float:
        return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)  # mJ

    def _read_power(self) -> float:
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle)  # mW

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
        self._nvml = self._handle = self.method = None
        self._opened = False

    # --- measuring -------------------------------------------------------------------------------------

    def measure(self, launch: Callable[[], Any], median_ms: float, plan: EnergyPlan = EnergyPlan()) -> Energy | None:
        """Energy per launch of ``launch`` (an asynchronous kernel launch whose median time is ``median_ms``).

        None when nothing could be measured; :attr:`reason` then says why.
        """
        if not self.available:
            return None
        sync = self._sync or _cuda_sync
        first = launches = max(1, math.ceil(plan.seconds * 1e3 / max(median_ms, 1e-6)))
        method = self.method
        while True:
            read = self._read_counter if method == COUNTER else self._read_power
            watts, start, end, error = self._batch(launch, launches, read, sync, plan, method)
            if error is not None:
                self.reason = f"NVML failed while measuring ({error})"
                return None
            if watts is not None:
                self.reason = None
                wall = end - start
                return Energy(watts * wall / launches, launches, wall, method, watts)  # type: ignore[arg-type]
            if 2 * (end - start) <= plan.max_seconds:
                launches *= 2  # too few counter steps (or power readings) inside the batch: run longer
                continue
            if method == COUNTER:  # a counter that does not move: use the power readings from now on
                self.method = method = POWER_SAMPLING
                launches = first
                continue
            what = "the energy counter nor the power reading"
            self.reason = f"neither {what} gave enough readings in a {end - start:.1f} s batch"
            return None

    def _batch(
        self,
        launch: Callable[[], Any],
        launches: int,
        read: Callable[[], float],
        sync: Callable[[], None],
        plan: EnergyPlan,
        method: str | None,
    ) -> tuple[float | None, float, float, str | None]:
        sync()
        poller = _Poller(read, plan.poll_s, self._clock)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, 0.001))  # the poller dates each read closely even while we launch
        try:
            poller.start()
            start = self._clock()
            for _ in range(launches):
                launch()
            sync()
            end = self._clock()
        finally:
            samples = poller.stop()
            sys.setswitchinterval(switch)
        power = counter_power if method == COUNTER else sampled_power
        return power(samples, start, end, plan), start, end, poller.error


def handle_by_bus_id(pynvml: Any, bus_id: str) -> Any:
    """NVML's handle of the GPU that CUDA names by ``bus_id`` (``cupy.cuda.Device().pci_bus_id``), or None. CUDA
    writes a 4-digit PCI domain ("0000:3B:00.0"), NVML an 8-digit one; both spellings are tried."""
    domain, _, rest = bus_id.partition(":")
    for spelling in dict.fromkeys((bus_id, f"{int(domain, 16):08X}:{rest}" if rest else bus_id)):
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(spelling)
        except pynvml.NVMLError:
            continue
    return None


def _cuda_sync() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


@functools.cache
def default_meter(device: int | None = None) -> EnergyMeter:
    """One meter per process and device (the GPU worker keeps NVML open for its life)."""
    return EnergyMeter(device)


T = TypeVar("T")


def pareto_front(items: Iterable[T], time: Callable[[T], float], energy: Callable[[T], float]) -> list[T]:
    """The items no other item beats on both time and energy, fastest first (of equal points, the first)."""
    front: list[T] = []
    lowest = math.inf
    for x in sorted(items, key=lambda x: (time(x), energy(x))):
        if energy(x) < lowest:
            front.append(x)
            lowest = energy(x)
    return front
