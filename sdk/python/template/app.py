"""The {{name}} reconciler: a Greeting (demo.operon.dev/v1alpha1, see crd.yaml)
wants a ConfigMap `<name>-greeting` holding `spec.message`, and reports
`status.observedGeneration` and `status.published` (whether that ConfigMap
exists). An empty message is a terminal failure: retrying cannot help, so
the host waits until the Greeting changes.

Run `pytest` for the unit tests, `operon build` to make dist/{{name}}.wasm and
`operon test` to run fixtures/ through the component.
"""

from __future__ import annotations

from dataclasses import dataclass

from operon_sdk import CONFIG_MAP, Context, Gvk, Manifest, Outcome, Reconciler, Request, Terminal, new_object

GREETING = Gvk("demo.operon.dev", "v1alpha1", "Greeting")


@dataclass
class GreetingSpec:
    message: str


@dataclass
class GreetingStatus:
    """What the reconciler reports."""

    observed_generation: int | None = None
    published: bool | None = None


@dataclass
class Greeting:
    """The parent, as the SDK reads it (metadata is on `request.metadata`).
    These dataclasses are the CRD's schema too: `operon build` writes crd.yaml
    from them (crd.py)."""

    spec: GreetingSpec


class GreetingReconciler(Reconciler[Greeting]):
    def manifest(self) -> Manifest:
        return Manifest("{{name}}", GREETING, owns=[CONFIG_MAP])

    def reconcile(self, request: Request[Greeting], ctx: Context) -> Outcome:
        message = request.object.spec.message
        if not message:
            raise Terminal("spec.message must not be empty")
        name = f"{request.name}-greeting"
        ctx.debug("publishing greeting", configmap=name)
        return (
            Outcome()
            .apply(new_object(CONFIG_MAP, name, data={"message": message}))
            .set_status({"observedGeneration": request.generation, "published": request.has_child(CONFIG_MAP, name)})
        )
