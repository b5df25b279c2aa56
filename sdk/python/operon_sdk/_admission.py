"""The component's ``admission`` exports (world ``reconciler-with-admission``):
imported by the entry module ``operon build`` writes for that world only."""

from __future__ import annotations

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import admission as wit

from . import run
from ._component import HOST, reconciler
from .admission import Denied, Operation, RawReview, UserInfo
from .kinds import Gvk

_OPERATIONS = {
    wit.Operation.CREATE: Operation.CREATE,
    wit.Operation.UPDATE: Operation.UPDATE,
    wit.Operation.DELETE: Operation.DELETE,
    wit.Operation.CONNECT: Operation.CONNECT,
}


def _review(review: wit.Review) -> RawReview:
    return RawReview(
        uid=review.uid,
        operation=_OPERATIONS[review.operation],
        kind=Gvk(review.kind.group, review.kind.version, review.kind.kind),
        sub_resource=review.sub_resource,
        namespace=review.namespace,
        name=review.name,
        object=review.object,
        old_object=review.old_object,
        user_info=UserInfo(review.user_info.username, review.user_info.uid, list(review.user_info.groups)),
        dry_run=review.dry_run,
    )


class Admission(exports.Admission):
    """The ``admission`` interface."""

    def validate(self, review: wit.Review) -> list[str]:
        try:
            return run.validate(reconciler(), HOST, _review(review))
        except Denied as denied:
            raise Err(wit.Denial(denied.message, denied.code)) from None

    def mutate(self, review: wit.Review) -> str | None:
        try:
            return run.mutate(reconciler(), HOST, _review(review))
        except Denied as denied:
            raise Err(wit.Denial(denied.message, denied.code)) from None
