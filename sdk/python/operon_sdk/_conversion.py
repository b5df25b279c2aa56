"""The component's ``conversion`` export (worlds ``reconciler-with-conversion``
and ``reconciler-with-admission-and-conversion``): imported by the entry
module ``operon build`` writes for those worlds only."""

from __future__ import annotations

from componentize_py_types import Err
from wit_world import exports

from . import run
from ._component import reconciler
from .conversion import ConversionError


class Conversion(exports.Conversion):
    """The ``conversion`` interface."""

    def convert(self, objects: list[str], desired_api_version: str) -> list[str]:
        try:
            return run.convert(reconciler(), objects, desired_api_version)
        except ConversionError as refused:
            raise Err(refused.message) from None
