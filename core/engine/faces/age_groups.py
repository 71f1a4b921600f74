"""The eight age groups of the ADIENCE benchmark, made contiguous for exact ages.

ADIENCE (Eidinger, Enbar & Hassner 2014) labels faces with eight age ranges, 0–2, 4–6,
8–13, 15–20, 25–32, 38–43, 48–53 and 60+, with gaps between them because its photos were
labelled by range. The D-SGHMC paper (Hernández et al., section 5.2, Table 3) classifies
those eight groups. UTKFace gives every face an exact age, so the ranges here close the
gaps (each group runs up to the year before the next one starts):
0–2, 3–7, 8–14, 15–24, 25–37, 38–47, 48–59, 60+.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True)
class AgeGroup:
    """Ages ``low`` to ``high`` inclusive (``high`` None: no upper end)."""

    low: int
    high: int | None

    @property
    def name(self) -> str:
        return f"{self.low}+" if self.high is None else f"{self.low}-{self.high}"

    def __contains__(self, age: object) -> bool:
        if not isinstance(age, int):
            return False
        return age >= self.low and (self.high is None or age <= self.high)


AGE_GROUPS: tuple[AgeGroup, ...] = (
    AgeGroup(0, 2),
    AgeGroup(3, 7),
    AgeGroup(8, 14),
    AgeGroup(15, 24),
    AgeGroup(25, 37),
    AgeGroup(38, 47),
    AgeGroup(48, 59),
    AgeGroup(60, None),
)
#: Class names of a face posterior, in class order: ``("0-2", "3-7", ..., "60+")``.
AGE_GROUP_NAMES: tuple[str, ...] = tuple(g.name for g in AGE_GROUPS)
#: The ADIENCE ranges these groups stand for (for comparisons with the paper).
ADIENCE_GROUP_NAMES: tuple[str, ...] = (
    "0-2", "4-6", "8-13", "15-20", "25-32", "38-43", "48-53", "60+",
)
_LOWS = [g.low for g in AGE_GROUPS]
#: Oldest age a file name may give; UTKFace's oldest face is 116.
MAX_AGE = 130


def age_group(age: int) -> int:
    """Index (0–7) of the group holding ``age`` in whole years.

    Raises ``ValueError`` for a negative age, an age above :data:`MAX_AGE` or a non-integer.
    """
    if isinstance(age, bool) or not isinstance(age, int):
        raise ValueError(f"an age must be a whole number of years, got {age!r}")
    if not 0 <= age <= MAX_AGE:
        raise ValueError(f"an age must lie between 0 and {MAX_AGE} years, got {age}")
    return bisect.bisect_right(_LOWS, age) - 1


def group_of_ages(ages) -> list[int]:
    """:func:`age_group` of every age in an iterable."""
    return [age_group(int(a)) for a in ages]
