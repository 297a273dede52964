package localcache

import "unsafe"

// slots returns n zeroed ring slots from a.
func (a *arena) slots(n int) []slot {
	b := a.bytes(n * int(unsafe.Sizeof(slot{})))
	return unsafe.Slice((*slot)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// cells returns n zeroed index cells from a.
func (a *arena) cells(n int) []cell {
	b := a.bytes(n * int(unsafe.Sizeof(cell(0))))
	return unsafe.Slice((*cell)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// freeCells returns cells from a.cells.
func (a *arena) freeCells(cs []cell) {
	if len(cs) == 0 {
		return
	}
	a.free(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(cs))), len(cs)*int(unsafe.Sizeof(cell(0)))))
}
