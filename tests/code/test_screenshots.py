"""scripts/screenshots.py: pages as PNGs in headless Chromium, servers started and stopped."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("screenshots", REPO / "scripts" / "screenshots.py")
assert _spec is not None and _spec.loader is not None
screenshots = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(screenshots)


def test_without_chromium_it_says_so_and_takes_nothing(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(screenshots, "browser", lambda: None)
    assert screenshots.main(["--out", str(tmp_path / "shots")]) == 0
    assert "skipped: no Chromium" in capsys.readouterr().out
    assert not (tmp_path / "shots").exists()


def test_missing_outputs_name_the_command_to_run(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(f"data_dir: {tmp_path / 'data'}\n")
    with pytest.raises(screenshots.ScreenshotError, match="make main"):
        screenshots.data_docs(params)


@pytest.mark.slow
def test_a_served_page_is_taken_and_the_server_stopped(tmp_path: Path) -> None:
    from PIL import Image

    chrome = screenshots.browser()
    if chrome is None:
        pytest.skip("no Chromium on PATH (apt-get install -y chromium)")
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(
        "<html><body style='margin:0;background:#123456'>"
        "<script>document.body.innerHTML='<h1 style=\"color:white\">drawn</h1>'</script>"
        "</body></html>"
    )
    port = screenshots.free_port()
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    command += ["--directory", str(site)]
    url = f"http://127.0.0.1:{port}/index.html"
    with screenshots.server(command, url, {}, tmp_path / "server.log"):
        shot = screenshots.screenshot(chrome, url, tmp_path / "page.png", 2000, (640, 400))
    assert not screenshots._answers(url)  # stopped with the block
    with Image.open(shot) as image:
        assert image.size == (640, 400) and image.mode == "P"  # reduced to a palette
        colours = {rgb for _, rgb in image.convert("RGB").getcolors(4096)}
    assert (0x12, 0x34, 0x56) in colours and len(colours) > 2  # the page and its drawn text


def test_the_fleet_map_of_the_published_placements_needs_no_browser(
    tiny: Path, tmp_path: Path
) -> None:
    from PIL import Image

    from hulk.jobs import dump_jobs, preset_jobs
    from hulk.settings import load_settings
    from hulk.stages import assign
    from tests.code.test_cli_assign import FAST

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**FAST, "data_dir": str(tiny)}))
    settings = load_settings(params)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(dump_jobs(preset_jobs(["GPT-2-1.5B", "BERT-large"])))
    assign.run(tiny, settings, jobs_file=jobs, strategy="teacher")
    with Image.open(screenshots.fleet_map_of_latest(params, tmp_path / "map.png")) as image:
        assert image.mode == "P" and image.size[0] > 400  # reduced to a palette, as the pages
