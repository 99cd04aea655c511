"""The app's frame around every page, even on a fresh server's first request for a deep link.

Streamlit decides once per server, at its first session, whether the app uses the legacy ``pages/``
folder: a folder of that name exists, so until ``app.py`` has called ``st.navigation`` once, a
request for ``/benchmarks`` runs ``pages/benchmarks.py`` alone, without the menu, the model status
line or the chart settings. A page that finds itself run that way switches the legacy mode off and
reruns, and the rerun goes through ``app.py`` to the same page.
"""

from __future__ import annotations

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager


def ensure_app_frame() -> None:
    """Rerun through ``app.py`` when Streamlit ran this page as a legacy ``pages/`` script."""
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()
