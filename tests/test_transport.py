import numpy as np

from mpi_join.runtime.wire import pack, pack_obj, unpack, unpack_obj


def test_pack_roundtrip_keeps_arrays_and_alignment():
    dt1 = np.dtype([("seq", "i8"), ("z", "S3")])
    dt2 = np.dtype([("a", "i4"), ("b", "f8")])
    a = np.array([(1, b"abc"), (2, b"x")], dt1)
    b = np.array([(5, 1.5)], dt2)
    header, (ra, re, rb) = unpack(pack([7, -1, 9], [a, a[:0], b]), [dt1, dt1, dt2])
    assert header.tolist() == [7, -1, 9]
    assert ra.tolist() == a.tolist() and len(re) == 0 and rb.tolist() == b.tolist()


def test_json_control_payload():
    assert unpack_obj(pack_obj({"error": None, "n": [1, 2]})) == {"error": None, "n": [1, 2]}
