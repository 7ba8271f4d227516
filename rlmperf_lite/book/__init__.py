"""The book's apparatus, and the only place chapter and lab numbers appear; no core module imports
it. Everything here takes library results and holds no maths. What lives where::

    charts.py, widgets.py, grid_charts.py,     shared charts, widgets, no-kernel grids and the
    static_calculators.py, workdepth_calc.py   WorkDepthCalculator component every lab uses
    cost_views.py, profile_views.py, ...       one topic's charts and widgets (dp_views.py: data
                                               parallelism, tp_views.py, pp_views.py, sim_views.py,
                                               async_views.py, framework_views.py, ray_views.py, ...)
    chNN_workdepth.py                          chapter NN's live work-depth calculator
    exercises/                                 the labs' exercise answers, computed when asked
                                               (check_answer("ch07.1", value); labs7_9.py, ...)

Calculators of every chapter are imported from their module, e.g.
``from rlmperf_lite.book.ch08_workdepth import tp_workdepth_widget``.
"""
from .charts import (brent_bounds_chart, brent_terms_chart, figure_html,
                     length_histogram_chart, learning_curve_chart, lines_chart, metrics_chart,
                     mismatch_curves_chart,
                     phase_roofline_chart, phase_time_chart, reached_costs, step_timeline_chart,
                     sweep_curves_chart, sweep_spread_chart, workdepth_chart)
from .cost_views import (brent_chart, estimate_table_html, estimate_widget, memory_chart,
                         phase_share_chart, rl_workdepth_widget, roofline_chart,
                         step_time_chart)
from .dp_views import (dp_grid, dp_grid_chart, dp_plan_results, dp_scaling_chart, dp_summary_html,
                       dp_widget, ring_table_html, state_bytes_chart, zero_comm_chart)
from .grid_charts import grid_chart, grpo_workdepth_grid, rl_workdepth_grid, variant_cost_grid
from .pp_views import (bytes_per_rank_chart, expert_load_chart, gantt_grid_chart,
                       pipeline_bubble_chart, pipeline_bubble_grid, pipeline_gantt_chart,
                       pipeline_gantt_grid, pipeline_widget, plan_table_html, planner_widget,
                       rejection_summary, rejection_table_html)
from .sim_views import (compare_table_html, placement_grid, placement_grid_chart,
                        placement_system, placement_widget, split_chart, timeline_chart,
                        utilisation_chart)
from .static_calculators import (estimate_calculator_chart, estimate_grid, static_chart,
                                 static_chart_html)
from .tp_views import (activation_chart, bytes_by_axis_chart, ring_work_chart, shard_shapes_html,
                       tp_grid, tp_grid_chart, tp_plan_results, tp_scaling_chart, tp_widget)
from .widgets import variant_cost_html, variant_cost_widget, workdepth_widget
from .workdepth_calc import WorkDepthCalculator, workdepth_bounds_chart, workdepth_table_html
from .step_calculators import (STATIC_OPTIONS, STEP_OPTIONS, step_workdepth_calculator,
                               step_workdepth_static, step_workdepth_widget)
from .ch07_workdepth import (DP_WD_OPTIONS, DP_WD_SEQ_LEN, DP_WD_STATIC_OPTIONS,
                             dp_workdepth_calculator, dp_workdepth_static, dp_workdepth_widget)
from .ch03_workdepth import (VARIANT_OPTIONS, variant_workdepth_calculator,
                             variant_workdepth_static, variant_workdepth_widget)
from .ch04_workdepth import (PHASE_SETTINGS, phase_workdepth_calculator, phase_workdepth_static,
                             phase_workdepth_widget)
from .ch06_workdepth import (PROFILE_OPTIONS, profile_workdepth_calculator,
                             profile_workdepth_static, profile_workdepth_widget)

__all__ = ["learning_curve_chart", "metrics_chart", "phase_time_chart", "workdepth_chart",
           "brent_terms_chart", "figure_html", "step_timeline_chart", "brent_bounds_chart",
           "length_histogram_chart", "phase_roofline_chart", "mismatch_curves_chart",
           "workdepth_widget", "sweep_curves_chart", "sweep_spread_chart", "reached_costs",
           "lines_chart",
           "variant_cost_html", "variant_cost_widget", "roofline_chart", "phase_share_chart",
           "memory_chart", "estimate_table_html", "estimate_widget", "brent_chart",
           "rl_workdepth_widget", "step_time_chart", "estimate_grid",
           "estimate_calculator_chart", "static_chart", "static_chart_html", "grid_chart",
           "grpo_workdepth_grid", "rl_workdepth_grid", "variant_cost_grid",
           "dp_grid", "dp_grid_chart", "dp_plan_results", "dp_scaling_chart", "dp_summary_html",
           "dp_widget", "ring_table_html", "state_bytes_chart", "zero_comm_chart",
           "bytes_per_rank_chart", "expert_load_chart", "gantt_grid_chart",
           "pipeline_bubble_chart", "pipeline_bubble_grid", "pipeline_gantt_chart",
           "pipeline_gantt_grid", "pipeline_widget", "plan_table_html", "planner_widget",
           "rejection_summary", "rejection_table_html",
           "activation_chart", "bytes_by_axis_chart", "ring_work_chart", "shard_shapes_html",
           "tp_grid", "tp_grid_chart", "tp_plan_results", "tp_scaling_chart", "tp_widget",
           "compare_table_html", "placement_grid", "placement_grid_chart", "placement_system",
           "placement_widget", "split_chart", "timeline_chart", "utilisation_chart",
           "WorkDepthCalculator", "workdepth_bounds_chart", "workdepth_table_html",
           "STEP_OPTIONS", "STATIC_OPTIONS", "step_workdepth_calculator",
           "step_workdepth_static", "step_workdepth_widget",
           "DP_WD_OPTIONS", "DP_WD_SEQ_LEN", "DP_WD_STATIC_OPTIONS", "dp_workdepth_calculator",
           "dp_workdepth_static", "dp_workdepth_widget",
           "VARIANT_OPTIONS", "variant_workdepth_calculator", "variant_workdepth_static",
           "variant_workdepth_widget", "PHASE_SETTINGS", "phase_workdepth_calculator",
           "phase_workdepth_static", "phase_workdepth_widget", "PROFILE_OPTIONS",
           "profile_workdepth_calculator", "profile_workdepth_static", "profile_workdepth_widget"]
