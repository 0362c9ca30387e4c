/* A library function both the test process (through ctypes) and a child call: the feedback
 * guard must record the child's call and not ours. */
__attribute__((noinline)) int ping(int n)
{
	return n + 1;
}
