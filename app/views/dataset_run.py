"""The Dataset tab's evaluation run: started with every column's posterior on the sets chosen,
reported as it goes (images done, images per second, time left; the faces described first), ended
with a sentence of what was evaluated, or cancelled, or stopped with the reason and, for a missing
MNIST, an offer to download it.

:class:`DatasetRun` is a part of :class:`app.views.dataset.DatasetView`, kept in its own module: it
drives that tab's status line, progress bar and buttons, and hands the results to its
``show_results``. It holds no widget of its own.
"""

from __future__ import annotations

import time

from PySide6.QtWidgets import QMessageBox

from app import settings as app_settings
from app.views.dataset_sets import (
    CHOOSE_DATA_FOLDER,
    CHOOSE_IMAGES,
    FACE_SET,
    IDLE_TEXT,
    IMAGES_FOLDER,
    MODE_WORDS,
    TASK_WORDS,
    explain_failure,
    plain_sentence,
    set_words,
)
from app.workers import PythonThreadGenerator, function_worker, generator_worker
from core.analysis.dataset import DatasetViews
from core.analysis.evaluation import progress_in_words
from core.engine.data.locate import sample_notice
from core.engine.naming import plural


class DatasetRun:
    """The evaluation run of the Dataset tab (mixed into :class:`app.views.dataset.DatasetView`,
    whose widgets, signals and state it uses: ``status``, ``progress``, the buttons, ``sets``,
    ``_worker``, ``_run`` ...)."""

    @property
    def running(self) -> bool:
        return self._worker is not None

    def evaluate(self, cache_only: bool = False) -> bool:
        """Start evaluating every column (False when nothing to do or already running).

        Right after start-up the columns may still be being read: the evaluation then starts
        when they are (True is returned)."""
        from core.outputs.evaluation_cache import run_evaluation

        if self.running:
            if cache_only or not (self._current_request and self._current_request[-1]):
                return False
            self._worker.quit()  # a silent look into the cache gives way to the real run
            self._worker = None
            self._set_running(False)
        items = self.items()
        if not items and self.task in self.workspace.unread_tasks:
            waiting = self._waiting_for_columns
            self._waiting_for_columns = cache_only and (waiting is None or waiting)
            if not cache_only:
                self.status.setText("The posteriors are still being read (the engine starts in the background): "
                                    "the evaluation starts as soon as they are ready.")
            return True
        if not items:
            if not cache_only:
                kind = "face head" if self.task == "faces" else "digit posterior"
                self.status.setText(f"Add a {kind} first (“Add posterior” above the columns).")
            return False
        self.offer_sets()
        dataset, ood, limit, samples = self.request()
        shape = {}
        if self.task == "images" and dataset in (IMAGES_FOLDER, None, ""):
            if not cache_only:
                self.status.setText(CHOOSE_IMAGES)
            return False
        if self.task != "faces":  # a folder of images (test or unfamiliar set) is read as the models read
            arch = items[0].posterior.arch
            shape = {"image_size": arch.image_size, "channels": arch.channels}
        self.result_keys_pending = [c.key for c in self.columns()]
        self._item_count = len(items)
        self._run += 1
        run = self._run
        self._run_task = self.task
        oods = self.sets.ood_specs()  # the one on the left (the histograms'), then any further ones
        ood_arg = oods if len(oods) > 1 else (oods[0] if oods else None)
        self._current_request = (dataset, ood_arg, limit, samples, cache_only)
        gen = run_evaluation(items, dataset, ood_arg, app_settings.data_folder(), limit, num_samples=samples,
                             cache_only=cache_only, **shape)
        # the faces may have to be described first, with dlib, which hangs in Qt's pool threads
        worker = PythonThreadGenerator(gen) if dataset == FACE_SET else generator_worker(gen)
        worker.yielded.connect(lambda record: self._on_worker_yielded(run, record))
        worker.returned.connect(lambda views: self._on_worker_returned(run, views))
        worker.errored.connect(lambda exc: self._on_worker_errored(run, exc))
        worker.finished.connect(lambda: self._on_worker_finished(run))
        self._worker = worker
        self._started = time.perf_counter()
        self._set_running(True)
        self.status.setText("Looking for earlier results…" if cache_only else "Reading the images…")
        self.save_settings()
        worker.start()
        return True

    def cancel(self, quiet: bool = False) -> None:
        """Stop the evaluation: the screen is free at once; the worker ends after its current batch.
        While the report is written instead, stop that."""
        if self._worker is None:
            self.exports.cancel()
            return
        self._worker.quit()
        self._worker = None
        self._run += 1  # late signals of the stopped run are ignored
        self._set_running(False)
        self.offer_sets()
        if not quiet:
            self.status.setText("Evaluation cancelled; nothing of it was kept.")
        self.run_ended.emit()

    def _set_running(self, running: bool) -> None:
        self.evaluate_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.sets.set_enabled(not running)
        self.progress.setVisible(running)
        if running:
            self.progress.setRange(0, 0)
            self.progress.setFormat("%v / %m images")

    def _on_worker_yielded(self, run: int, record) -> None:
        if run != self._run or record.phase == "loading":
            return
        if record.phase == "descriptors":  # the faces test split, described once, then cached
            if record.values.get("cached"):
                self.status.setText("Read the face descriptors from the cache.")
                return
            from core.engine.training_plan import duration_in_words

            self.progress.setRange(0, max(record.total, 1))
            self.progress.setValue(record.step)
            left = ""
            if "to_describe" in record.values:  # the first record, before any face is described
                faces = int(record.values["to_describe"])
                kept = f" ({record.step:,} described before)" if record.step else ""
                self.status.setText(
                    f"Describing {plural(faces, 'face')} with dlib takes "
                    f"{duration_in_words(record.values['estimated_seconds'])}{kept}. They are kept: a "
                    "cancelled run, or a later one with more images, goes on from them.")
            elif record.values.get("faces_per_second"):
                seconds = (record.total - record.step) / record.values["faces_per_second"]
                left = f", {duration_in_words(seconds).replace('a few seconds', 'seconds')} left"
            self.progress.setFormat(f"describing faces: %v / %m{left}")
            self.progress_reported.emit(record.step, record.total, "describing faces")
            return
        self.progress.setFormat("%v / %m images")
        index = int(record.values.get("index", 0))
        total = int(record.values.get("images_total", 0))
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(int(record.values.get("images_done", 0)))
        n = max(len(self.result_keys_pending), self._item_count)  # a tier's hidden reference included
        rate = progress_in_words(record.values.get("images_done", 0), total, record.values)  # images/s, time left
        self.status.setText(f"Evaluating {record.phase} ({index + 1} of {n}): {rate}…")
        self.progress_reported.emit(self.progress.value(), total, record.phase)

    def _on_worker_returned(self, run: int, views: DatasetViews | None) -> None:
        if run != self._run:
            return
        if views is None:
            self.status.setText(IDLE_TEXT)
            return
        elapsed = time.perf_counter() - self._started
        if self._run_task != self.task:  # the mode changed meanwhile: kept for when it comes back
            self._kept[self._run_task] = (views, list(self.result_keys_pending))
            self.status.setText(f"The evaluation of the {TASK_WORDS[self._run_task]} has finished: choose "
                                f"{MODE_WORDS[self._run_task]} to see it.")
            self.save_settings(evaluated=True)
            return
        self.show_results(views)
        cached = sum(c.cached for c in views.columns[:len(self.result_keys)])
        ev = views.evaluation
        text = f"{plural(len(self.result_keys), 'posterior')} on {len(views.data):,} {set_words(ev.dataset)}"
        for other, set_name in zip(views.ood_sets or ([views.ood] if views.ood is not None else []),
                                   ev.ood_names(), strict=False):
            text += f" and {len(other):,} {set_words(set_name)}"
        text += f", in {elapsed:.1f} s"
        if cached:
            text += f" ({cached} from the cache)"
        what = "photos" if views.faces is not None else "images"
        text += f". Click a confusion cell or a histogram bar to see its {what}."
        note = (views.data.source.get("data_check") or {}).get("note")
        if note:  # the folder changed since training: what changed, and which images were left out
            text += f" Note: {note[0].upper()}{note[1:]}"
        notice = sample_notice(ev.data_source, *(ev.ood_sources or [ev.ood_source]))  # the bundled samples
        self.status.setText(text + (f"\n{notice}" if notice else ""))
        self.save_settings(evaluated=True)

    def _on_worker_errored(self, run: int, exc: BaseException) -> None:
        if run != self._run:
            return
        if self._current_request and self._current_request[-1]:  # the silent look into the cache
            self.status.setText(IDLE_TEXT)
            return
        self.status.setText("The evaluation stopped.")
        if not self._offer_download(exc):
            QMessageBox.critical(self, "The evaluation stopped",
                                 explain_failure(exc, *(self._current_request or ("", None))[:2]))

    def _offer_download(self, exc: BaseException) -> bool:
        """For a missing MNIST: say what and where, and offer to download it (True when shown)."""
        from core.engine.data.locate import DOWNLOAD_IN_WINDOW, DatasetMissingError

        if not (isinstance(exc, DatasetMissingError) and exc.downloadable):
            return False
        box = QMessageBox(QMessageBox.Icon.Warning, "The evaluation stopped",
                          exc.with_hint(DOWNLOAD_IN_WINDOW) + " " + CHOOSE_DATA_FOLDER, parent=self)
        download = box.addButton("Download MNIST", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Close)
        box.exec()
        if box.clickedButton() is download:
            self.download_and_evaluate(exc.name, exc.split)
        return True

    def download_and_evaluate(self, name: str, split: str = "test") -> None:
        """Download ``name`` into the user cache in the background, then evaluate again."""
        from core.engine.data.locate import download_dataset

        worker = function_worker(download_dataset, name, split)
        worker.returned.connect(lambda _folder: self.evaluate())
        worker.errored.connect(lambda exc: self.status.setText(f"The download failed: {plain_sentence(exc)}"))
        worker.finished.connect(lambda: setattr(self, "_download_worker", None))
        self._download_worker = worker  # kept until it has finished
        self.status.setText("Downloading MNIST into the user cache…")
        worker.start()

    def _on_worker_finished(self, run: int) -> None:
        if run != self._run:
            return
        self._worker = None
        self._set_running(False)
        self.offer_sets()
        self.run_ended.emit()
