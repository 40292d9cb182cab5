"""resnas dashboard (Streamlit, read-only): searches, Pareto fronts, the front at the target budget, trials,
width certificates, export.

    streamlit run dashboard/app.py --server.address 127.0.0.1 --server.headless true [-- --storage URL]

The store URL: `--storage URL` after `--`, else $RESNAS_STORAGE, else sqlite:///resnas.db in
the working directory (see `dashboard.reads.storage_url`). The app only reads the store.

Everything runs from `main()` under the `__main__` guard: Streamlit runs this file as
`__main__`, while a multiprocessing "spawn" child of a process that ran it (e.g. a test session
using Streamlit's AppTest) re-imports it as `__mp_main__` and must not run the app.
"""

import streamlit as st

from dashboard import reads
from dashboard.views import PAGES
from nas.store import StoreError


def main() -> None:
    st.set_page_config(page_title="resnas", layout="wide")
    url = reads.storage_url()
    page = st.sidebar.radio("page", list(PAGES), key="page")
    st.sidebar.caption(f"store: {reads.display_url(url)}")
    if st.sidebar.button("refresh now", key="refresh"):
        st.cache_data.clear()
    try:
        summaries = reads.list_searches(url)
    except StoreError as err:
        st.error(str(err))
        return
    if not summaries:
        st.info("no searches in this store yet: start one with `nas search --name NAME --trial-flops C`")
        return
    PAGES[page](url, summaries)


if __name__ == "__main__":
    main()
