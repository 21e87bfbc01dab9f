"""`v1 view`: a local web viewer for the run folders `v1 eval` and `v1 train` write.

`build_app` is the aiohttp application (a page, its assets, and a JSON API with server-side
paging, filtering, search and sorting); `serve` runs it. `RolloutIndex` indexes a
`results.jsonl` by line offsets and reads it incrementally, so a run being written shows live.
Importing this package imports aiohttp; `import v1` does not import it.
"""

from v1.view._runs import RolloutIndex, RunFolderError, find_runs, is_run_folder
from v1.view._server import build_app, serve

__all__ = ["RolloutIndex", "RunFolderError", "build_app", "find_runs", "is_run_folder", "serve"]
