"""The PyTorch side of the input pipeline (``framework=pytorch``): the same datasets, the same bytes and
sample orders as the tf.data side (``jobs.data.pipeline``), read through ``torch.utils.data.DataLoader``.

- ``samples``: the datasets a DataLoader reads: ``ImageFiles`` (one JPEG per file, read whole and
  decoded with PIL, as torchvision's ``ImageFolder`` does), ``Hdf5Images`` (h5py, each worker opening the
  files itself) and ``TFRecordShards`` (the TFRecord shards the tf.data side reads, as an
  ``IterableDataset``: each worker reads its share of the shards through, as WebDataset's tar shards
  are read);
- ``order``: the run's sample order (global / local / none shuffle, a shuffle buffer) with numpy;
- ``tfrecord``: the TFRecord framing and the three ``tf.train.Example`` features this tool writes,
  read without TensorFlow;
- ``build``: the DataLoader of one run from the cell's ``loader.*`` settings, and the run's loop.
"""
