"""Views: altair charts and ipywidgets front ends. They take library results and hold no maths."""
from .charts import learning_curve_chart, metrics_chart, phase_time_chart, workdepth_chart
from .widgets import workdepth_widget

__all__ = ["learning_curve_chart", "metrics_chart", "phase_time_chart", "workdepth_chart",
           "workdepth_widget"]
