"""Test helpers built on the public Keras API."""

from keras_capsules.testing.test_case import TestCase
