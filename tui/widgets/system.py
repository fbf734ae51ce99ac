"""System panel: this host (psutil, NVML) and what the watched server reports about itself."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from tui.sources.base import Panel
from tui.widgets.base import PanelWidget, View, bar


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


class SystemPanel(PanelWidget):
    """CPU and memory of this machine and of the server's processes.

    "host" is the machine the UI runs on, read with psutil (and NVML for NVIDIA GPUs). "server"
    lines come from the runtime's resource samples: its host's CPU and memory, each process's CPU
    (percent of one core) and resident memory, GPU utilization where NVML is present there.
    """

    PANEL = Panel.SYSTEM
    TITLE = "system"
    COMPONENT_CLASSES: ClassVar[set[str]] = {"system--label", "system--bar", "system--note"}

    def partial(self, view: View) -> bool:
        return view.host is not None

    def draw(self, view: View, width: int) -> Text:
        label = self.style_of("system--label")
        bar_w = max(4, min(20, width - 24))
        t = Text(no_wrap=True, overflow="ellipsis")
        h = view.host
        if h is not None:
            t.append(f"{'host cpu':<12}", label)
            t.append(bar(h.cpu_percent / 100, bar_w), self.style_of("system--bar"))
            t.append(f" {h.cpu_percent:5.1f}% of {len(h.per_cpu_percent)} cores\n")
            t.append(f"{'host mem':<12}", label)
            t.append(bar(h.mem_percent / 100, bar_w), self.style_of("system--bar"))
            t.append(f" {h.mem_percent:5.1f}%\n")
            for i, g in enumerate(h.gpus):
                t.append(f"{f'gpu{i}':<12}", label)
                t.append(bar(g.util_percent / 100, bar_w), self.style_of("system--bar"))
                t.append(
                    f" {g.util_percent:3.0f}% {_mib(g.mem_used_bytes)}/{_mib(g.mem_total_bytes)}\n"
                )
            if not h.gpus and h.gpu_note:
                t.append(f"{'gpu':<12}", label)
                t.append(h.gpu_note + "\n", self.style_of("system--note"))
        s = view.snapshot.resources
        if s is None:
            why = view.why_empty.get(Panel.SYSTEM, "no resource samples from the source")
            t.append(f"{'server':<12}", label)
            t.append(why, self.style_of("system--note"))
            return t
        t.append(f"{'server cpu':<12}", label)
        t.append(bar(s.system_cpu_percent / 100, bar_w), self.style_of("system--bar"))
        t.append(f" {s.system_cpu_percent:5.1f}%\n")
        t.append(f"{'server mem':<12}", label)
        t.append(bar(s.system_mem_percent / 100, bar_w), self.style_of("system--bar"))
        t.append(f" {s.system_mem_percent:5.1f}%\n")
        for name, cpu in sorted(s.process_cpu.items()):
            rss = s.process_rss_bytes.get(name)
            t.append(f"  {name[:10]:<10}", label)
            t.append(f"{cpu:6.1f}% cpu" + (f"  {_mib(rss)}" if rss is not None else "") + "\n")
        for i, u in enumerate(s.gpu_util):
            mem = s.gpu_mem_bytes[i] if i < len(s.gpu_mem_bytes) else None
            t.append(f"{f'server gpu{i}':<12}", label)
            t.append(bar(u, bar_w), self.style_of("system--bar"))
            t.append(f" {u * 100:3.0f}%" + (f" {_mib(mem)}" if mem is not None else "") + "\n")
        return t
