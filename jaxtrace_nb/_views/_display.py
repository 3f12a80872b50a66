"""Showing a trace table in IPython: the live widget, then its static report (text and HTML).

Below both the widget (`_widget`, whose ``_ipython_display_`` lands here) and the IPython glue
(`_ipython`), so that neither imports the other.
"""

from __future__ import annotations


def widgets_shown(shell) -> bool:
    """Whether the frontend can show widgets: a kernel (ipykernel) yes, terminal IPython no."""
    return getattr(shell, "kernel", None) is not None


def display_table(table, *, display_id: bool = False):
    """Show `table` as two outputs: the live widget, then its static report (text and HTML).

    The static output is what nbconvert (offline too), GitHub, terminals and kernel-less
    viewers show; next to a rendered widget the stylesheet hides it. In a terminal only the
    static report is shown. Returns the static output's display handle (with `display_id`).
    """
    from IPython import get_ipython
    from IPython.display import display

    if widgets_shown(get_ipython()):
        data, metadata = table._repr_mimebundle_()
        display(data, metadata=metadata, raw=True)
    return display(table.static_bundle(), raw=True, display_id=display_id or None)
