"""Adam as the paper's TensorFlow (1.x, ``tf.train.AdamOptimizer``) applied it: one fused
``ResourceApplyAdam`` per variable. Its state is held as Keras's Adam holds it, under the same names (the
step count, the learning rate, then each variable's two moments), so a ``tf.train.Checkpoint`` of it
(``optimizer=``) is laid out as before, and one written with Keras's Adam restores into it.

Keras 3's Adam does the same arithmetic as about twenty traced operations per variable: on the CI's AlexNet
(64 px, width 0.25) its first step took 1.9 CPU-s to trace against 0.45 s here, paid again in every cell.
Later steps take the same time (0.02 s)."""

from __future__ import annotations

import tensorflow as tf


class Adam(tf.Module):
    """Adam over ``variables`` (a model's trainable ones), with Keras's defaults."""

    def __init__(
        self,
        variables,
        learning_rate: float = 1e-4,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
    ):
        super().__init__(name="adam")
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        # Keras's names: its checkpoints hold optimizer/_iterations, _learning_rate and _variables/<k>
        self._iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iteration")
        self._learning_rate = tf.Variable(
            learning_rate, dtype=tf.float32, trainable=False, name="learning_rate"
        )
        moments = []
        for v in variables:
            moments += [tf.Variable(tf.zeros_like(v), trainable=False, name=n) for n in ("m", "v")]
        self._variables = [self._iterations, self._learning_rate, *moments]
        self._trainable_variables = list(variables)

    @property
    def iterations(self) -> tf.Variable:
        return self._iterations

    @property
    def momentums(self) -> list:
        return self._variables[2::2]

    @property
    def velocities(self) -> list:
        return self._variables[3::2]

    def apply_gradients(self, grads_and_vars) -> None:
        """One update of every variable by its gradient, as Keras's ``apply_gradients`` takes them."""
        self._iterations.assign_add(1)
        step = tf.cast(self._iterations, tf.float32)
        beta_1_power, beta_2_power = tf.pow(self.beta_1, step), tf.pow(self.beta_2, step)
        for (grad, var), m, v in zip(grads_and_vars, self.momentums, self.velocities, strict=True):
            tf.raw_ops.ResourceApplyAdam(
                var=var.handle,
                m=m.handle,
                v=v.handle,
                beta1_power=tf.cast(beta_1_power, var.dtype),
                beta2_power=tf.cast(beta_2_power, var.dtype),
                lr=tf.cast(self._learning_rate, var.dtype),
                beta1=tf.cast(self.beta_1, var.dtype),
                beta2=tf.cast(self.beta_2, var.dtype),
                epsilon=tf.cast(self.epsilon, var.dtype),
                grad=grad,
            )
