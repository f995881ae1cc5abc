"""Plain-data views of results (dicts for JSON, rows for CSV). No rich, no click."""

from .compare import COMPARE_CSV_COLUMNS, compare_csv_rows, compare_to_dict

__all__ = ["COMPARE_CSV_COLUMNS", "compare_csv_rows", "compare_to_dict"]
