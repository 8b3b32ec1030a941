import pytest

from mpbench.errors import InvalidInput
from mpbench.workloads import Conv, Dense, get_workload


def test_mnist_dense_matches_the_keras_guide():
    workload = get_workload("mnist_dense")
    assert workload.batch_size == 8192 and workload.epochs == 5
    assert workload.default_units("cuda") == 4096 and workload.default_units("cpu") == 64
    layers = workload.layers(4096)
    assert layers == [Dense(4096), Dense(4096), Dense(10, activation=None)]
    # 784*4096+4096 + 4096*4096+4096 + 4096*10+10, counted by hand
    assert workload.param_count(4096) == 3_215_360 + 16_781_312 + 40_970


def test_mnist_flops_are_three_forwards_less_the_first_layers_input_gradient():
    workload = get_workload("mnist_dense")
    forward_per_sample = 2 * (784 * 64 + 64 * 64 + 64 * 10)
    first = 2 * 784 * 64
    assert workload.flops_per_step(100, units=64) == (3 * forward_per_sample - first) * 100
    assert workload.flops_per_step(8192, units=64) == 8192 * 229_120  # issue 10's figure


def test_cifar_cnn_shapes_params_and_flops():
    workload = get_workload("cifar10_cnn")
    assert isinstance(workload.layers()[0], Conv)
    # conv1 896, conv2 18,496, dense 6*6*64*128+128 = 295,040, logits 1,290
    assert workload.param_count() == 896 + 18_496 + 295_040 + 1_290
    conv1 = 2 * 3 * 3 * 3 * 32 * 30 * 30
    conv2 = 2 * 3 * 3 * 32 * 64 * 13 * 13
    dense = 2 * (2304 * 128 + 128 * 10)
    assert workload.flops_per_step(1) == 3 * (conv1 + conv2 + dense) - conv1


def test_unknown_workload_lists_the_choices():
    with pytest.raises(InvalidInput, match="mnist_dense, cifar10_cnn"):
        get_workload("resnet50")
