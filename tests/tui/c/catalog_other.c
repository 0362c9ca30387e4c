/* The second definition of the static twin(): the catalog must call the name ambiguous. */
__attribute__((noinline)) static int twin(int x)
{
	return x - 1;
}

int twin_caller(int x)
{
	return twin(x);
}
