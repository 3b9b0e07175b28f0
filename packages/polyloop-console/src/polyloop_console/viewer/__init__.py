"""``polyloop view`` and the console's run pages (designs 0048, 0061, 0071): what a page shows,
read from a log into values (:mod:`~polyloop_console.viewer.pages`), rendered by the Jinja
templates in ``polyloop_console/templates/viewer/``."""
