"""The dashboard's pages by name, in the sidebar's order: those about whole searches (`search_pages`) and
those about trials (`trial_pages`), sharing their widgets and formats (`widgets`).

Each page is one function of (store URL, search summaries). Selections (searches, trial, filters) are widgets
drawn once per script run; what they show is drawn by a `render` closure, which `widgets.live` turns into a
fragment that Streamlit reruns every `REFRESH_S` seconds while the search is running, so the page updates
without reloading. Widget keys are unique across pages: Streamlit keeps one session state for all. (This
module is not named `pages`: Streamlit would take a `pages/` folder beside app.py for its own multipage
navigation.)
"""

from .effects_page import effects_page
from .search_pages import pareto_page, searches_page, target_page
from .trial_pages import export_page, table_page, trial_page, width_page

PAGES = {
    "Searches": searches_page,
    "Pareto front": pareto_page,
    "Target budget": target_page,
    "Knob effects": effects_page,
    "Trial detail": trial_page,
    "Width view": width_page,
    "Trial table": table_page,
    "Export": export_page,
}
