"""The ``ScheduledScale`` custom resource (``example.operon.dev/v1alpha1``), as
in ``../scheduledscale/crd.yaml``, and the slim view of the Deployment it owns.

Read leniently, as the Rust example's ``#[serde(default)]`` types: what is
missing takes a default and is refused by :func:`scheduledscale.schedule.validate`
with a message, as the CRD schema would."""

from __future__ import annotations

from dataclasses import dataclass, field

from operon_sdk import I32, Gvk

SCHEDULED_SCALE = Gvk("example.operon.dev", "v1alpha1", "ScheduledScale")


@dataclass
class Entry:
    """One entry of the schedule: from ``at`` (a time of day, UTC) on, ``replicas``."""

    at: str = ""
    """``HH:MM`` or ``HH:MM:SS``."""
    replicas: I32 = 1
    """Pods from then on."""


@dataclass
class ScheduledScaleSpec:
    """``spec``: what the user wants."""

    image: str = ""
    """Container image."""
    schedule: list[Entry] = field(default_factory=list)
    """The daily schedule."""


@dataclass
class ScheduledScaleStatus:
    """``status``: written as ``observedGeneration``, ``replicas``,
    ``activeSince`` and ``nextChange`` (RFC 3339, seconds, UTC)."""

    observed_generation: int
    """The ``metadata.generation`` this status describes."""
    replicas: I32
    """The replicas of the entry in force."""
    active_since: str
    """When the entry in force began."""
    next_change: str
    """When the next entry begins."""


@dataclass
class ScheduledScale:
    """The parent. Only ``spec``: the SDK reads ``metadata``."""

    spec: ScheduledScaleSpec


@dataclass
class ExistingSpec:
    replicas: I32 | None = None


@dataclass
class Existing:
    """The fields of the existing Deployment read here."""

    spec: ExistingSpec | None = None

    @property
    def replicas(self) -> int:
        """``spec.replicas``, 1 (Kubernetes' default) when unset."""
        if self.spec is None or self.spec.replicas is None:
            return 1
        return self.spec.replicas
