"""Stage 2, Spec -> Plan: decide where every op runs, how the plan is cut into tasks, and what fits.

:mod:`.place` places every op as TensorFlow does (scopes, rules, strategies,
defaults; the reasons kept), :mod:`.partition` cuts each device's ops into the
tasks a run submits and decides how each loop runs (:func:`~orchestrator.plan.partition.plan_tasks`),
:mod:`.memory` checks each device's peak against its cap, and :mod:`.diff`
compares two plans (``plan --diff``). The :class:`~orchestrator.plan.records.Plan`
carries every decision; compile and report read them and never recompute them.
"""
