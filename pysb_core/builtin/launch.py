"""The default ``pysb_launch``: hand the plan to the provider (runs last)."""

from __future__ import annotations

from pysb_core._startup.markers import hookimpl

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    import subprocess

    from pysb_core.plan import LaunchPlan
    from pysb_core.provider import Provider


@hookimpl(trylast=True)
def pysb_launch(plan: LaunchPlan, provider: Provider) -> subprocess.Popen[bytes]:
    return provider.launch(plan, **plan.popen_kwargs)
