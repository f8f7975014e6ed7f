"""Reports: result records in, metrics, plots and the static leaderboard site out.

The metrics are defined in docs/metrics.md and the records in docs/records.md.

Reads only the result records (`summary.json`, docs/records.md) and never imports torch, so the site
can be built anywhere pandas and seaborn run (matplotlib and seaborn are imported only to draw).
Entry points:

    from reports.records import load_records      # validated records + skipped (path, reason)
    from reports.site import build_site           # bench report --runs DIR --out leaderboard/
"""
