"""The `sink` role: writes the result rows that arrive on its result edges (graph.RESULTS).

A strategy whose join cores send their results on (`Output.send_results`) ends its graph in a
sink; the worker writes what the sink emits, so each result's production delay is measured here,
against the `_tin` it carried from the core. Results in flight on a result edge at a checkpoint
are channel state, recorded and replayed by the worker like input batches."""
import numpy as np

from ..runtime.operator import Operator, Output


class ResultSink(Operator):
    def __init__(self, job, rank, graph, dtypes):
        super().__init__(job, rank, graph, dtypes)
        self.cols = [f"{n}_seq" for n in job.stream_names]
        self.received = 0

    def on_data(self, src, header, batches):
        rows = batches[0]
        self.received += len(rows)
        out = Output()
        out.emit([np.ascontiguousarray(rows[c]) for c in self.cols], np.ascontiguousarray(rows["_tin"]))
        return out

    def stats(self):
        return {"window_tuples": 0, "results_received": self.received}
