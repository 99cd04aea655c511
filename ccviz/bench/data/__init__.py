"""Generated benchmark inputs: documents with one fact, haystacks with needles, prose texts, their vocabulary, and
where a span of the text lands in the prompt's tokens."""
