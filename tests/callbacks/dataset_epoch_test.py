import os

import numpy as np

from keras_capsules.callbacks import DatasetEpoch
from keras_capsules.datasets import mnist
from keras_capsules.testing import TestCase
from tests import resume


class DatasetEpochTest(TestCase):
    def batches_seen(self, backup_dir, interrupt_at=None, synced=True):
        """The training batches a 4-epoch `fit` on `ShiftedDigits` feeds
        its model, backed up in `backup_dir`."""
        x, y = mnist.load_sample("test")
        data = mnist.ShiftedDigits(x[:32], y[:32], batch_size=16, seed=5)
        callbacks = [DatasetEpoch(data)] if synced else []
        return resume.batches_seen(data, 4, backup_dir, interrupt_at, callbacks)

    def test_resumed_run_sees_the_batches_of_an_uninterrupted_run(self):
        temp = self.get_temp_dir()
        whole = self.batches_seen(os.path.join(temp, "whole"))
        backup = os.path.join(temp, "cut")
        cut = self.batches_seen(backup, interrupt_at=2)
        resumed = self.batches_seen(backup)
        # Two batches an epoch; the interrupted run trained on epochs 0
        # and 1 and the first batch of epoch 2, then resumed at epoch 2.
        self.assertLen(whole, 8)
        self.assertLen(cut, 5)
        self.assertLen(resumed, 4)
        for got, expected in zip(cut[:4] + resumed, whole):
            np.testing.assert_array_equal(got, expected)

    def test_without_it_a_resumed_run_starts_the_data_again(self):
        temp = self.get_temp_dir()
        whole = self.batches_seen(os.path.join(temp, "whole"), synced=False)
        backup = os.path.join(temp, "cut")
        self.batches_seen(backup, interrupt_at=2, synced=False)
        resumed = self.batches_seen(backup, synced=False)
        # The new dataset replays epoch 0 where epoch 2 should be.
        np.testing.assert_array_equal(resumed[0], whole[0])
        self.assertFalse(np.array_equal(resumed[0], whole[4]))

    def test_rejects_a_dataset_without_epoch(self):
        with self.assertRaisesRegex(
            TypeError, "`epoch` attribute.*Received: dataset=list"
        ):
            DatasetEpoch([1, 2])
