"""Sokoban text boards drawn as small grids of coloured squares (for tooltips and the Graph
page's anchor panel). Pure: strings in, an HTML string out."""

from __future__ import annotations

__all__ = ["is_board", "board_html"]

#: Sokoban text boards (the gym-sokoban / verl-agent rendering): wall, floor, box, target,
#: box on target, player, player on target.
_BOARD_COLOURS = {
    "#": "#5d4037",
    " ": "#f3efe6",
    "_": "#f3efe6",
    "$": "#e0a030",
    ".": "#f3efe6",
    "*": "#e0a030",
    "@": "#1565c0",
    "+": "#1565c0",
}
_BOARD_MARKS = {".": "#d32f2f", "*": "#d32f2f", "+": "#d32f2f"}


def is_board(anchor) -> bool:
    """Whether an anchor's text is a Sokoban board (≥ 3 equal-width rows of board symbols with
    walls and a player)."""
    text = str(anchor)
    rows = text.split("\n")
    return (
        len(rows) >= 3
        and len(rows) <= 40
        and len({len(r) for r in rows}) == 1
        and 3 <= len(rows[0]) <= 40
        and set(text) <= set(_BOARD_COLOURS) | {"\n"}
        and "#" in text
        and ("@" in text or "+" in text)
    )


def board_html(anchor, cell_px: int = 12) -> str:
    """A Sokoban board as a small grid of coloured squares (inline styles only: walls brown,
    boxes amber, targets red dots, the player blue); '' when the text is not a board."""
    if not is_board(anchor):
        return ""
    cells = []
    for row in str(anchor).split("\n"):
        tds = []
        for ch in row:
            mark = _BOARD_MARKS.get(ch)
            dot = (
                (
                    f"<div style='width:{cell_px // 2}px;height:{cell_px // 2}px;margin:auto;"
                    f"border-radius:50%;background:{mark}'></div>"
                )
                if mark
                else ""
            )
            tds.append(
                f"<td style='width:{cell_px}px;height:{cell_px}px;padding:0;"
                f"background:{_BOARD_COLOURS[ch]}'>{dot}</td>"
            )
        cells.append("<tr>" + "".join(tds) + "</tr>")
    return (
        "<table class='crbc-board' style='border-collapse:collapse;margin:4px 0' "
        "title='wall brown · box amber · target red · player blue'>" + "".join(cells) + "</table>"
    )
