"""mt.viz.explore in a real browser: headless chromium driven by selenium (.ci/run installs both;
skipped where either is missing). A click opens a module, the slider moves the highlight, the
search finds a node, and the page makes no network request and logs no console error."""

import shutil
import tempfile

import pytest

import minitensor as mt
import minitensor.functional as F

webdriver = pytest.importorskip("selenium.webdriver")
By = pytest.importorskip("selenium.webdriver.common.by").By

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER and shutil.which("dot")),
    reason="needs chromium, chromedriver and Graphviz's dot (.ci/run installs them)",
)
FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
    "--disable-background-networking --disable-component-update --disable-sync"
).split()


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for flag in FLAGS:
        opts.add_argument(flag)
    profile = tempfile.TemporaryDirectory()
    opts.add_argument(f"--user-data-dir={profile.name}")  # a new, empty profile
    opts.add_argument("--window-size=1400,900")
    opts.binary_location = CHROMIUM
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(DRIVER))
    yield driver
    driver.quit()
    profile.cleanup()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The README's 2 + 2-layer Transformer, explored and saved as a file."""
    from transformer import Transformer, TransformerConfig

    mt.manual_seed(0)
    model = Transformer(TransformerConfig.small(src_vocab_size=14, tgt_vocab_size=14))
    src, tgt_in, tgt_out = (mt.randint(3, 14, (2, n)) for n in (7, 5, 5))
    with mt.autograd.keep_intermediates():
        loss = F.cross_entropy(model(src, tgt_in).transpose(1, 2), tgt_out)
    ex = mt.viz.explore(loss, model=model)
    return ex, ex.save(tmp_path_factory.mktemp("explore") / "graph.html")


def _open(browser, page):
    browser.get(page[1].as_uri())
    browser.get_log("browser")  # start each test with an empty console
    return browser


def _boxes(browser):
    return browser.find_elements(By.CSS_SELECTOR, "#view g.node")


def _title(box):
    return " ".join(t.text for t in box.find_elements(By.TAG_NAME, "text"))


def _errors(browser):
    return [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def test_a_click_opens_a_module_and_its_frame_closes_it(browser, page):
    b = _open(browser, page)
    start = b.execute_script("return window.mtExplorer.level")
    assert start == page[0].data["start"]
    n_before = len(_boxes(b))
    (encoder_layers,) = [x for x in _boxes(b) if "EncoderLayer" in _title(x)]
    encoder_layers.click()
    assert b.execute_script("return window.mtExplorer.level") == start + 1
    assert len(_boxes(b)) > n_before
    titles = [_title(x) for x in _boxes(b)]
    assert any("encoder.layers.0.self_attn" in t for t in titles)  # its insides are boxes now
    # click a cluster's label (an open module's frame) to close it again
    (label,) = [
        t
        for t in b.find_elements(By.CSS_SELECTOR, "#view g.cluster text")
        if "layers.0 · EncoderLayer" in (t.get_attribute("textContent") or "")
    ]
    b.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", label)
    assert b.execute_script("return window.mtExplorer.level") == start
    assert not _errors(b)


def test_clicking_an_op_shows_its_details(browser, page):
    b = _open(browser, page)
    (op,) = [x for x in _boxes(b) if _title(x).startswith("cross_entropy")]
    op.click()
    text = b.find_element(By.ID, "details").text
    assert "cross_entropy" in text and "output" in text and "gradient norm" in text
    assert "test_explore_browser.py" in text  # the user's source line
    assert not _errors(b)


def test_the_slider_moves_the_highlight(browser, page):
    b = _open(browser, page)
    slider = b.find_element(By.ID, "slider")
    n_steps = len(page[0].data["steps"])
    assert slider.get_attribute("max") == str(n_steps)

    def move_to(k):
        b.execute_script(
            "arguments[0].value = arguments[1];arguments[0].dispatchEvent(new Event('input'));",
            slider,
            k,
        )
        states = [x.get_attribute("data-state") for x in _boxes(b)]
        current = [_title(x) for x in _boxes(b) if x.get_attribute("data-state") == "current"]
        return states, current

    states, current = move_to(0)
    assert set(states) == {""} and current == []
    states, current = move_to(1)
    assert len(current) == 1 and current[0].startswith("cross_entropy")
    fills = b.execute_script(
        "return Array.from(document.querySelectorAll('#view g.node[data-state=current] path,"
        " #view g.node[data-state=current] polygon')).map((e) => e.getAttribute('fill'))"
    )
    assert "orange" in fills  # the box is painted, not just marked
    assert f"1/{n_steps}" in b.find_element(By.ID, "stepinfo").text
    states, later = move_to(n_steps // 2)
    assert len(later) == 1 and later != current and states.count("done") >= 1
    states, last = move_to(n_steps)  # the walk is over: no module half done
    assert "partly" not in states and len(last) == 1 and states.count("done") > len(states) / 2
    assert "gradient arriving" in b.find_element(By.ID, "details").text
    assert not _errors(b)


def test_the_search_finds_a_node(browser, page):
    b = _open(browser, page)
    box = b.find_element(By.ID, "search")
    box.send_keys("generator")
    entries = b.find_elements(By.CSS_SELECTOR, "#matches .match-entry")
    assert entries and any("generator" in e.text for e in entries)
    assert b.find_elements(By.CSS_SELECTOR, "#view g.node.match")  # marked in the picture
    box.clear()
    box.send_keys("layer_norm\n")  # Enter goes to the first match (an op inside a module)
    assert "layer_norm" in b.find_element(By.ID, "details").text
    assert b.find_elements(By.CSS_SELECTOR, "#view g.node.selected")
    assert not _errors(b)


def test_zoom_and_pan_change_the_view(browser, page):
    b = _open(browser, page)
    from selenium.webdriver.common.action_chains import ActionChains

    view = b.find_element(By.CSS_SELECTOR, "#view svg")

    def box():
        text = b.execute_script("return arguments[0].getAttribute('viewBox')", view)
        return [float(v) for v in text.split()]

    full = box()
    b.find_element(By.ID, "zin").click()
    zoomed = box()
    assert zoomed[2] < full[2] and zoomed[3] < full[3]
    drag = ActionChains(b).move_to_element(view).click_and_hold().move_by_offset(80, 40)
    drag.release().perform()
    panned = box()
    assert panned[:2] != zoomed[:2] and panned[2:] == zoomed[2:]
    b.find_element(By.ID, "fit").click()
    assert box() == full


def test_no_network_request_and_no_console_error(browser, page):
    b = _open(browser, page)
    csp = b.find_element(By.CSS_SELECTOR, "meta[http-equiv='Content-Security-Policy']")
    assert "default-src 'none'" in csp.get_attribute("content")
    for _ in range(2):  # open a module, move the slider: still nothing fetched
        boxes = [x for x in _boxes(b) if "DecoderLayer" in _title(x)]
        if boxes:
            boxes[0].click()
    resources = b.execute_script("return performance.getEntriesByType('resource').length")
    assert resources == 0
    assert not _errors(b)


def test_an_attention_softmax_shows_its_weights_and_a_view_can_be_linked(browser, tmp_path):
    """A page's address can say what to show (#find=…&step=…): here the softmax of a small
    attention block, whose details draw its weights as a heatmap."""
    from test_explore import make

    model, x, loss = make()
    ex = mt.viz.explore(loss, model=model)
    url = ex.save(tmp_path / "attention.html").as_uri() + "#step=1&find=softmax"
    browser.get(url)
    details = browser.find_element(By.ID, "details")
    assert "softmax" in details.text and "attention weights" in details.text
    (soft,) = [d for d in ex.data["items"] if d.get("heat")]
    cells = browser.find_elements(By.CSS_SELECTOR, "#details svg.heatmap rect")
    assert len(cells) == soft["heat"]["rows"] * soft["heat"]["cols"] == 9
    assert browser.find_element(By.ID, "slider").get_attribute("value") == "1"
    assert not _errors(browser)


def test_inline_in_a_notebook_the_page_runs_inside_its_iframe(browser, page, tmp_path):
    """What Jupyter shows (_repr_html_): an iframe whose srcdoc is the page, scripts allowed."""
    notebook = tmp_path / "cell.html"
    notebook.write_text(f"<html><body>{page[0]._repr_html_()}</body></html>", encoding="utf-8")
    browser.get(notebook.as_uri())
    browser.get_log("browser")
    browser.switch_to.frame(browser.find_element(By.TAG_NAME, "iframe"))
    try:
        assert _boxes(browser)  # the script ran and drew the start level
        assert browser.execute_script("return window.mtExplorer.level") == page[0].data["start"]
        assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    finally:
        browser.switch_to.default_content()
    assert not _errors(browser)
