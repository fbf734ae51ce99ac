"""A modal list of the simulation's offload policies (``o``)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import OptionList


class PolicyPicker(ModalScreen[str | None]):
    """Pick one of ``policies``; dismisses with its name, or ``None`` on Escape."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, policies: tuple[str, ...], current: str | None = None) -> None:
        super().__init__()
        self.policies = policies
        self.current = current

    def compose(self) -> ComposeResult:
        yield OptionList(*self.policies, id="policies")

    def on_mount(self) -> None:
        ol = self.query_one(OptionList)
        ol.border_title = "offload policy"
        if self.current in self.policies:
            ol.highlighted = self.policies.index(self.current)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.policies[event.option_index])

    def action_cancel(self) -> None:
        self.dismiss(None)
