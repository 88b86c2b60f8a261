"""Screenshots of the pages a user opens after `make main`, taken by headless Chromium.

    .venv/bin/python scripts/screenshots.py [--params params.yaml] [--out docs/screenshots]

It starts the MLflow UI on the project's tracking database and a Prefect server with a
temporary home (each on a free port of 127.0.0.1, both stopped at the end), publishes the
current ``latest.json`` to that server as the assign flow's artifacts (the flow
``placements-report``: nothing is placed again, the data folder is only read), and saves:

- ``mlflow-run.png``: the newest training run's overview (the gate's decision, its metrics);
- ``mlflow-model-version.png``: the champion version of the registered model, with its schema;
- ``data-docs.png``: the Great Expectations Data Docs index (a local file; offline it shows
  its note with the newest result pages);
- ``prefect-artifact.png``: the ``placements`` table artifact;
- ``fleet-map.png``: not a page but the fleet map of the published ``latest.json``, as each
  training run logs it for its own placements (``plots/fleet_map.png``).

The PNGs are reduced to 256 colours (they show flat UI colours) to stay small in the
repository. Without Chromium (``apt-get install -y chromium``) the script says so and exits 0
without a screenshot: it is documentation, not a check. Pages drawn by JavaScript get
`--budget` milliseconds of virtual time to load and draw.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WINDOW = (1400, 900)
WIDE = (1800, 1100)  # MLflow's pages keep a third of the window for the assistant panel
BUDGET_MS = 15_000  # virtual time for a page drawn by JavaScript
START_TIMEOUT_S = 120.0  # a server's start (Prefect migrates its new database first)


class ScreenshotError(RuntimeError):
    """A server did not start, a page could not be taken, or the data is not there yet."""


def browser() -> str | None:
    """The headless-capable Chromium on PATH, or None."""
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def free_port() -> int:
    """A TCP port of 127.0.0.1 free right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def screenshot(
    chrome: str,
    url: str,
    path: Path,
    budget_ms: int = BUDGET_MS,
    window: tuple[int, int] = WINDOW,
) -> Path:
    """`url` as a PNG at `path`, `window` pixels, after `budget_ms` of virtual time (a fresh
    browser profile); the PNG is then reduced to 256 colours."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hulk-chromium-") as profile:
        command = [
            chrome,
            "--headless",
            "--no-sandbox",  # as root (containers, CI) Chromium refuses its sandbox
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-extensions",
            f"--user-data-dir={profile}",
            f"--window-size={window[0]},{window[1]}",
            f"--virtual-time-budget={budget_ms}",
            f"--screenshot={path}",
            url,
        ]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=120 + budget_ms / 1000
        )
    if result.returncode != 0 or not path.is_file():
        raise ScreenshotError(f"{chrome} could not take {url}: {result.stderr.strip()[-400:]}")
    _reduce(path)
    return path


def _reduce(path: Path) -> None:
    """256 colours, no dithering: a UI's flat colours survive and the file shrinks 3-4 times."""
    from PIL import Image

    with Image.open(path) as image:
        reduced = image.convert("RGB").quantize(
            colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
        )
    reduced.save(path, optimize=True)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(200 <= response.status < 300)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def server(
    command: Sequence[str], ready_url: str, env: dict[str, str], log: Path
) -> Iterator[None]:
    """Run `command` (its own process group) until the block ends; wait until `ready_url`
    answers 2xx. The group is stopped with SIGTERM, then SIGKILL after 10 s."""
    with log.open("w") as out:
        process = subprocess.Popen(
            list(command), env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(ready_url):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-1500:]
                raise ScreenshotError(f"{command[0]} did not start ({ready_url}):\n{tail}")
            time.sleep(1.0)
        yield
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


Page = tuple[str, str, tuple[int, int], int]  # file name, URL path, window, budget (ms)


def mlflow_pages(params: Path, budget_ms: int) -> tuple[str, list[Page]]:
    """The tracking URI and the pages of the newest training run and the champion version."""
    from hulk import registry_tracking
    from hulk.settings import load_settings

    settings = load_settings(params)
    database = registry_tracking.sqlite_path(settings)
    if database is not None and not database.is_file():
        raise ScreenshotError(f"{database}: no MLflow database yet: run `make main` first")
    view = registry_tracking.UI_VIEW
    with registry_tracking.tracking(settings) as track:
        runs = track.client.search_runs(
            [track.experiment_id],
            filter_string="attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if not runs:
            raise ScreenshotError(f"no finished training run in {track.tracking_uri}")
        version = track.client.get_model_version_by_alias(track.registered_model, "champion")
        run = runs[0].info
        page = f"/#/experiments/{run.experiment_id}/runs/{run.run_id}"
        model = f"/#/models/{track.registered_model}/versions/{version.version}?{view}"
        return track.tracking_uri, [
            ("mlflow-run.png", f"{page}?{view}", WIDE, budget_ms),
            ("mlflow-model-version.png", model, (WIDE[0], 1300), budget_ms),
        ]


def data_docs(params: Path) -> Path:
    """The Data Docs index of the project's data folder."""
    from hulk.settings import load_settings

    index = load_settings(params).data_dir / "validation" / "docs" / "index.html"
    if not index.is_file():
        raise ScreenshotError(f"{index}: no Data Docs yet: run `make main` first")
    return index.resolve()


def fleet_map_of_latest(params: Path, path: Path) -> Path:
    """The fleet map (`hulk.plots.fleet_map`) of the data folder's published placements."""
    from hulk.data_folder import load_fleet
    from hulk.placements import LATEST
    from hulk.placements_read import read_placements
    from hulk.plots import fleet_map
    from hulk.settings import load_settings

    settings = load_settings(params)
    latest = settings.assign.placements_dir / LATEST
    if not latest.is_file():
        raise ScreenshotError(f"{latest}: no published placements yet: run `make main` first")
    fleet, inventory, _ = load_fleet(settings.data_dir, settings)
    placements = read_placements(latest, fleet).placements
    title = f"Published placements ({latest.name}) on the current fleet"
    fleet_map(inventory, placements, fleet, path, title=title)
    _reduce(path)
    return path


def _venv_tool(name: str) -> str:
    """A console script of this interpreter's environment (mlflow, prefect)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else name


def _artifact_id(api: str, key: str) -> str:
    request = urllib.request.Request(
        f"{api}/artifacts/filter",
        data=json.dumps({"artifacts": {"key": {"any_": [key]}}, "limit": 1}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        found = json.loads(response.read())
    if not found:
        raise ScreenshotError(f"the Prefect server at {api} has no artifact {key!r}")
    return str(found[0]["id"])


def take_all(chrome: str, params: Path, out: Path, budget_ms: int) -> list[Path]:
    """Every screenshot of the module's list, into `out`."""
    from flows.assign import ARTIFACT_KEY

    taken: list[Path] = []
    uri, pages = mlflow_pages(params, budget_ms)
    index = data_docs(params)
    with tempfile.TemporaryDirectory(prefix="hulk-screenshots-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        port = free_port()
        mlflow_ui = [
            _venv_tool("mlflow"),
            "ui",
            "--backend-store-uri",
            uri,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ]
        base = f"http://127.0.0.1:{port}"
        with server(mlflow_ui, f"{base}/health", env, Path(tmp) / "mlflow.log"):
            for name, page, window, budget in pages:
                taken.append(screenshot(chrome, base + page, out / name, budget, window))
        taken.append(screenshot(chrome, index.as_uri(), out / "data-docs.png", budget_ms))

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        prefect_env = {
            **env,
            "PREFECT_HOME": str(Path(tmp) / "prefect"),
            "PREFECT_API_URL": f"{base}/api",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_LOGGING_LEVEL": "WARNING",
        }
        prefect = [_venv_tool("prefect"), "server", "start", "--host", "127.0.0.1"]
        prefect += ["--port", str(port)]
        with server(prefect, f"{base}/api/health", prefect_env, Path(tmp) / "prefect.log"):
            report = (
                "from flows.assign import placements_report_flow; "
                f"placements_report_flow(params={str(params)!r})"
            )
            subprocess.run(
                [sys.executable, "-c", report], env=prefect_env, check=True, cwd=REPO, timeout=300
            )
            artifact = _artifact_id(f"{base}/api", ARTIFACT_KEY)
            page = f"{base}/artifacts/artifact/{artifact}"
            wide = (1600, WINDOW[1])  # the table's columns
            taken.append(screenshot(chrome, page, out / "prefect-artifact.png", budget_ms, wide))
    taken.append(fleet_map_of_latest(params, out / "fleet-map.png"))
    return taken


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    parser.add_argument("--budget", type=int, default=BUDGET_MS, help="virtual time per page, ms")
    args = parser.parse_args(argv)
    chrome = browser()
    if chrome is None:
        print("skipped: no Chromium on PATH (apt-get install -y chromium); nothing taken")
        return 0
    try:
        taken = take_all(chrome, args.params.resolve(), args.out, args.budget)
    except ScreenshotError as error:
        print(f"screenshots: {error}", file=sys.stderr)
        return 2
    for path in taken:
        print(f"{path} ({path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
