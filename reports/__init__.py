"""Reports: result records in, metrics, plots and the static leaderboard site out (DESIGN sections 3, 7).

Reads only the result records (`summary.json`, docs/records.md) and never imports torch, so the site
can be built anywhere pandas and seaborn run (matplotlib and seaborn are imported only to draw).
Entry points:

    from reports.records import load_records      # validated records + skipped (path, reason)
    from reports.site import build_site           # bench report --runs DIR --out leaderboard/
"""
