from dataclasses import dataclass

from .sliding import Sliding


@dataclass
class StreamingLLM(Sliding):
    """StreamingLLM: a sliding window plus attention sinks (the first 4 tokens are always frozen)."""

    name = "streaming_llm"
    title = "StreamingLLM"
    summary = "StreamingLLM: sliding window plus the first 4 tokens as attention sinks"
    sinks = 4
