"""Helpers shared by the Streamlit pages. Plain Python: no tensor maths here, only wiring."""
