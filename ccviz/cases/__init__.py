"""Generated inputs, shared by the app and the benchmark harness: documents with one fact, haystacks with
needles, prose texts, their vocabulary, and where a span of the text lands in the prompt's tokens."""
