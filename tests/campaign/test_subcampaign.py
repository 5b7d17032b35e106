"""What the warm server of a process's sub-campaigns (the paper study's grids, the capacity search's rounds)
imports, read from the grids' own overrides: TensorFlow only where a cell would run on it, and Keras only
where a cell's workload builds a Keras model (``Workload.uses_keras``), or where that cannot be told here."""

from campaign.subcampaign import preload_for
from jobs.execution import warm

TF_DATA = (*warm.COMMON, warm.TENSORFLOW_DATA)
KERAS = (*warm.COMMON, warm.TENSORFLOW)


def test_grids_of_tf_data_workloads_get_a_server_without_keras():
    assert preload_for([["threads=1,2"]]) == TF_DATA  # the config's default workload: the micro-benchmark
    assert preload_for([["workload=microbench", "threads=1,2"]]) == TF_DATA
    grids = [["workload=readonly,microbench"], ["workload=emulated", "accelerator=ci_small"]]
    assert preload_for(grids) == TF_DATA


def test_one_grid_that_builds_a_keras_model_gives_the_server_keras_for_all():
    assert preload_for([["workload=microbench"], ["workload=alexnet_small", "threads=1"]]) == KERAS
    assert preload_for([["workload=checkpoint"]]) == KERAS


def test_what_cannot_be_read_here_counts_as_building_one():
    assert preload_for([["+experiment=paper"]]) == KERAS
    assert preload_for([["workload=my_own", "hydra.searchpath=[file:///nonexistent]"]]) == KERAS


def test_grids_that_run_no_tensorflow_get_no_tensorflow():
    assert preload_for([["workload=microbench", "platform.dry_run=true"]]) == warm.COMMON
    assert preload_for([["workload=alexnet", "framework=pytorch"]]) == warm.COMMON
    assert preload_for([]) == warm.COMMON
