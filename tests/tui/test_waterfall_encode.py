"""The waterfall draws a runtime record's ``encode`` stage (``--encoder onnx``) in its own color."""

from __future__ import annotations

from aiohttp import web

from edgeserve.records import RequestRecord, Stage
from tests.tui.servers import event_stream, serve
from tui.app import TuiApp
from tui.widgets.waterfall import WaterfallPanel, stage_class

ENCODED = RequestRecord(
    id="enc", worker=0, num_images=1, arrived_s=1.0, preproc_queued_s=1.0, preproc_start_s=1.0,
    decode_end_s=1.1, resize_end_s=1.2, normalize_end_s=1.3, encode_end_s=1.9, preproc_end_s=1.9,
    engine_queued_s=1.9, first_token_s=2.0, last_token_s=2.0, finished_s=2.0, output_tokens=1)


async def test_the_encode_stage_is_a_bar_of_its_own_color(host) -> None:
    app_ = web.Application()
    app_.router.add_get("/v1/events", event_stream([[ENCODED]]))
    async for url in serve(app_):
        from tui.sources.live import LiveSource

        app = TuiApp(LiveSource(url), host_probe=host)
        async with app.run_test(size=(160, 48)) as pilot:
            for _ in range(100):
                await pilot.app.workers.wait_for_complete()
                await app.refresh_data()
                await pilot.pause()
                if app.state.finished_total:
                    break
                await pilot.pause(0.05)
            await pilot.press("5")
            panel = app.query_one(WaterfallPanel)
            assert [r.id for r in panel.rows] == ["enc"]
            drawing = panel.drawing
            encode_style = panel.style_of(stage_class(Stage.ENCODE))
            runs = [drawing.plain[s.start:s.end] for s in drawing.spans if s.style == encode_style]
            # 0.6 s of the request's 1 s: the longest stage of its bar
            assert runs and set(runs[0]) == {"█"} and len(runs[0]) >= 10
