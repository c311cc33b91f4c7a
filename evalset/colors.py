"""Decision colours shared by the figures and the dashboard (colour-blind safe: Okabe-Ito)."""

from __future__ import annotations

#: one colour per decision or standing against the leader
DECISION_COLORS = {
    "leader": "#000000",
    "below the leader": "#0072B2",
    "equivalent to the leader": "#009E73",
    "undecided": "#E69F00",
    "not compared": "#999999",
    "B better": "#0072B2",
    "A better": "#D55E00",
    "equivalent": "#009E73",
}
