"""The dashboard in a real headless Chromium (the distribution's package, driven by Playwright; no
browser download): the page takes a token, draws a real job's loss curve, and an injected NaN shows up
in the timeline as an alert (the loss_spike detection) and an action (the rollback).

Every wait is Playwright's `wait_for_function`/`wait_for_selector`: a condition polled in the page,
bounded by a timeout. With CI set, a missing chromium or playwright fails the test; elsewhere it skips."""

import json
import os
import shutil

import httpx
import pytest

pytestmark = pytest.mark.slow

LAYOUT = "dp=2,precision=fp32,gbs=4,mbs=2"
WAIT_MS = 420_000  # a job's first steps on a loaded 2-core machine (torchrun start, tiny model)


def _missing(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI installs it: .ci/run apt-get installs chromium, make test installs playwright)")
    pytest.skip(reason)


@pytest.fixture
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[dev]')")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        _missing("no chromium on PATH (apt-get install chromium)")
    with sync_playwright() as p:
        # --no-sandbox: Chromium's sandbox refuses to run as root, which CI is
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield b
        b.close()


def test_page_shows_a_jobs_loss_curve_and_the_injected_fault(browser, service_factory, corpus_dir, tmp_path):
    svc = service_factory(f"sqlite:///{tmp_path / 'state.db'}").start()
    admin = {"Authorization": f"Bearer {svc.token}"}
    token = httpx.post(svc.url + "/v1/tokens", json={"user": "alice"}, headers=admin, timeout=60).json()["token"]
    ckpt = tmp_path / "job"
    body = {"layout": LAYOUT, "seq_len": 64, "steps": 10, "ckpt_every": 3, "data": str(corpus_dir), "ckpt": str(ckpt),
            "inject": ["nan@step=4"]}
    r = httpx.post(svc.url + "/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    page = browser.new_page()
    page.goto(svc.url + "/")
    page.fill("#token", "not-a-token")
    page.click("#connect")
    page.wait_for_selector("#status.error", timeout=60_000)
    assert "token refused" in page.text_content("#status")
    page.click("#logout")  # forgets the token and reloads
    page.wait_for_selector("#login:not([hidden])", timeout=60_000)
    page.fill("#token", token)
    page.click("#connect")
    page.wait_for_selector("#who:has-text('alice (user)')", timeout=60_000)
    assert token not in page.url and page.evaluate("sessionStorage.getItem('wanka_token')") == token
    assert page.locator("#nodes .node[data-node='local'] .cell.util").count() == 1

    # the injected NaN: the trainer rolls back, the service audits it, the page lists it
    event = "#timeline li.event[data-rule='loss_spike'][data-decision='rollback']"
    page.wait_for_selector(event, timeout=WAIT_MS)
    alert, action = page.text_content(f"{event} .alert"), page.text_content(f"{event} .action")
    assert f"job {job_id}" in alert and "batch" in alert, alert
    assert action.startswith("rollback: trainer restored step"), action

    # the loss curve: at least 4 steps drawn, each a step the trainer really logged
    points = f"#job-{job_id} svg.loss-chart circle.pt"
    page.wait_for_function(f"document.querySelectorAll(\"{points}\").length >= 4", timeout=WAIT_MS)
    shown = {int(s) for s in page.eval_on_selector_all(points, "cs => cs.map(c => c.dataset.step)")}
    logged = {json.loads(line)["step"] for line in (ckpt / "metrics.jsonl").read_text().splitlines() if line.strip()}
    assert len(shown) >= 4 and shown <= logged, (shown, logged)
    assert page.locator(f"#job-{job_id} svg.tokens_per_s-chart polyline.line").count() == 1
    assert "no prediction" in page.text_content(f"#job-{job_id} .prediction")  # CPU ranks: nothing to price
