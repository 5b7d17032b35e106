"""The PyTorch side of the input pipeline (``framework=pytorch``): the same datasets, the same bytes and
sample orders as the tf.data side (``jobs.frameworks.tensorflow.pipeline``), read through
``torch.utils.data.DataLoader``.

- ``samples``: the datasets a DataLoader reads: ``ImageFiles`` (one JPEG per file, read whole and
  decoded with PIL, as torchvision's ``ImageFolder`` does), ``Hdf5Images`` (h5py, each worker opening the
  files itself) and ``TFRecordShards`` (the TFRecord shards the tf.data side reads, as an
  ``IterableDataset``: each worker reads its share of the shards through, as WebDataset's tar shards
  are read);
- ``s3map``: one GET per image through the cell's object client, in the workers;
- ``build``: the DataLoader of one run from the cell's ``loader.*`` settings, and the run's loop.

What it shares with Grain's loader is in ``jobs.data``: the run's sample order with numpy (``order``) and
TFRecord read without TensorFlow (``tfrecord``).
"""
