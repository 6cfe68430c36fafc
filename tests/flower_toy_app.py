"""A ClientApp for the step-worker tests: counts its messages in the node's Context."""

import os

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.query("skfedclust_step")
def step(message, context):
    n = int(context.state["count"]["n"]) + 1 if "count" in context.state else 1
    context.state["count"] = ConfigRecord({"n": n})
    if message.content["ask"]["fail"]:
        raise ValueError("asked to fail")
    return Message(
        RecordDict({"reply": ConfigRecord({"pid": os.getpid(), "n": n})}), reply_to=message
    )
