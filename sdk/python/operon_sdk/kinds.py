"""Kubernetes kinds: :class:`Gvk` and the kinds reconcilers commonly own."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Gvk:
    """A Kubernetes kind: API group (empty for the core group), version and kind.

    >>> Gvk.from_api_version("apps/v1", "Deployment")
    Gvk(group='apps', version='v1', kind='Deployment')
    >>> str(Gvk("", "v1", "Service"))
    'v1 Service'
    """

    group: str
    version: str
    kind: str

    @staticmethod
    def from_api_version(api_version: str, kind: str) -> Gvk:
        """The kind of an object with this ``apiVersion`` (``apps/v1``, or ``v1``) and ``kind``."""
        group, _, version = api_version.rpartition("/")
        return Gvk(group, version, kind)

    @staticmethod
    def of(obj: dict) -> Gvk | None:
        """The kind of a JSON object, or None when it lacks ``apiVersion`` or ``kind``."""
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            return None
        return Gvk.from_api_version(api_version, kind)

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def matches(self, obj: dict) -> bool:
        """Whether the JSON object ``obj`` is of this kind."""
        return Gvk.of(obj) == self

    def __str__(self) -> str:
        return f"{self.api_version} {self.kind}"


CONFIG_MAP = Gvk("", "v1", "ConfigMap")
SECRET = Gvk("", "v1", "Secret")
SERVICE = Gvk("", "v1", "Service")
SERVICE_ACCOUNT = Gvk("", "v1", "ServiceAccount")
PERSISTENT_VOLUME_CLAIM = Gvk("", "v1", "PersistentVolumeClaim")
DEPLOYMENT = Gvk("apps", "v1", "Deployment")
STATEFUL_SET = Gvk("apps", "v1", "StatefulSet")
DAEMON_SET = Gvk("apps", "v1", "DaemonSet")
JOB = Gvk("batch", "v1", "Job")
CRON_JOB = Gvk("batch", "v1", "CronJob")
INGRESS = Gvk("networking.k8s.io", "v1", "Ingress")
NETWORK_POLICY = Gvk("networking.k8s.io", "v1", "NetworkPolicy")
ROLE = Gvk("rbac.authorization.k8s.io", "v1", "Role")
ROLE_BINDING = Gvk("rbac.authorization.k8s.io", "v1", "RoleBinding")
