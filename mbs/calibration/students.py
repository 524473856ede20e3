"""The student set: its policies in config order and its target student, looked up in one place.

``students.policies`` lists the policies (live ones sampled from a backend, recorded ones read
from a dataset) and ``students.target`` names the one whose pass rates decide hard seeds
(calibration), qualified problems (synthesis) and the Golden Goose filter.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from mbs.calibration.sampling import Policy, policies_from_cfg
from mbs.errors import ConfigError


@dataclass(frozen=True)
class StudentSet:
    """The policies of ``students`` and the name of the target.

    Attributes:
        policies: Every policy, in config order.
        target_name: ``students.target``.
    """

    policies: tuple[Policy, ...]
    target_name: str

    @classmethod
    def from_cfg(cls, students: DictConfig) -> StudentSet:
        """Read the ``students`` config node once.

        Raises:
            ValueError: A policy with an unknown source, or a live policy without a backend.
        """
        return cls(tuple(policies_from_cfg(students)), str(students.target))

    @property
    def live(self) -> list[Policy]:
        """The live policies (sampled from a backend), in config order."""
        return [p for p in self.policies if p.source == "live"]

    def target(self) -> Policy:
        """The target student.

        Raises:
            ConfigError: ``students.target`` names no policy of the set.
        """
        found = next((p for p in self.policies if p.name == self.target_name), None)
        if found is None:
            raise ConfigError(f"students.target={self.target_name!r} is not a policy name: {[p.name for p in self.policies]}")
        return found

    def live_target(self, needed_for: str) -> Policy:
        """The target student, which ``needed_for`` samples (so it must be live).

        Raises:
            ConfigError: ``students.target`` names no policy, or a recorded one.
        """
        found = self.target()
        if found.source != "live":
            raise ConfigError(f"students.target={self.target_name!r} is a recorded policy; {needed_for} needs a live student")
        return found
