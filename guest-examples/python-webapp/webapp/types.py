"""The ``WebApp`` custom resource (``example.operon.dev/v1alpha1``, the version
reconciled; ``v1`` is served through :mod:`webapp.conversion`), as in
``../webapp/crd.yaml``, and the slim view of the Deployments it owns."""

from __future__ import annotations

from dataclasses import dataclass, field

from operon_sdk import I32, Condition, Gvk, Terminal

WEBAPP = Gvk("example.operon.dev", "v1alpha1", "WebApp")


@dataclass
class EnvVar:
    """One environment variable (value empty when absent)."""

    name: str
    value: str = ""


@dataclass
class IngressSpec:
    """``spec.ingress``: host, path prefix (``/`` when absent), IngressClass."""

    host: str
    path: str | None = None
    class_name: str | None = None


@dataclass
class WebAppSpec:
    """``spec``. Defaults match the CRD's, so an object that did not go through
    the API server's defaulting reads the same."""

    image: str
    replicas: I32 = 1
    port: I32 = 8080
    env: list[EnvVar] = field(default_factory=list)
    ingress: IngressSpec | None = None

    def validate(self) -> None:
        """Checks what the CRD schema also checks, for objects that did not go
        through it (fixtures, an API server without the schema).

        Raises:
            Terminal: retrying an invalid spec cannot help.
        """
        if not self.image.strip():
            raise Terminal("spec.image must not be empty")
        if self.replicas < 0:
            raise Terminal(f"spec.replicas must be 0 or more, not {self.replicas}")
        if not 1 <= self.port <= 65535:
            raise Terminal(f"spec.port must be between 1 and 65535, not {self.port}")
        for index, var in enumerate(self.env):
            if not var.name:
                raise Terminal(f"spec.env[{index}].name must not be empty")
            if any(earlier.name == var.name for earlier in self.env[:index]):
                raise Terminal(f"spec.env[{index}]: {var.name} is set twice")
        if self.ingress is not None:
            if not self.ingress.host:
                raise Terminal("spec.ingress.host must not be empty")
            if self.ingress.path is not None and not self.ingress.path.startswith("/"):
                raise Terminal("spec.ingress.path must start with /")


@dataclass
class WebAppStatus:
    """``status``: the generation it describes, ready pods and the ``Ready`` condition."""

    observed_generation: int = 0
    ready_replicas: I32 = 0
    conditions: list[Condition] = field(default_factory=list)


@dataclass
class WebApp:
    """A web application. Only ``spec`` and ``status``: the SDK reads ``metadata``."""

    spec: WebAppSpec
    status: WebAppStatus | None = None


# A slim view of an existing Deployment: only the fields this reconciler reads
# (whether its rollout is done is the host's readiness, not read here).


@dataclass
class Container:
    image: str | None = None


@dataclass
class PodSpec:
    containers: list[Container] = field(default_factory=list)


@dataclass
class PodTemplate:
    spec: PodSpec = field(default_factory=PodSpec)


@dataclass
class DeploymentSpec:
    replicas: I32 | None = None
    template: PodTemplate = field(default_factory=PodTemplate)


@dataclass
class DeploymentStatus:
    ready_replicas: I32 | None = None


@dataclass
class Deployment:
    """The fields of an existing Deployment this reconciler reads."""

    spec: DeploymentSpec | None = None
    status: DeploymentStatus | None = None

    @property
    def replicas(self) -> int:
        """``spec.replicas``, 1 when unset (the API server's default)."""
        return self.spec.replicas if self.spec is not None and self.spec.replicas is not None else 1

    @property
    def image(self) -> str | None:
        """The first container's image."""
        if self.spec is None or not self.spec.template.spec.containers:
            return None
        return self.spec.template.spec.containers[0].image
