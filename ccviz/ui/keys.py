"""Session-state keys of the boxes every page with a document shares, read by more than one module of the UI."""

QUESTION_KEY = "doc.question"  # the Question box, shared like the document's "doc.text"
EXPECT_KEY = "doc.expect"  # the Expected answer box, shared the same way
