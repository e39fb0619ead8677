! Fortran test program for the benchlake tracer (mpif.h bindings). Every rank r of N:
!   MPI_Isend 10 integers (40 B) tag 7 to right, MPI_Irecv from left, MPI_Waitall;
!   MPI_Send 3 double precision (24 B) tag 8 to right / MPI_Recv from left (even ranks
!   send first); MPI_Allreduce 4 integers; MPI_Bcast 5 integers from root 0;
!   MPI_Barrier; MPI_Alltoallv with r+1 integers to every rank; bandela_caliper(3,0)
!   around the Allreduce.
program fortran_test
  implicit none
  include 'mpif.h'
  integer :: ierr, r, n, right, left, i
  integer :: reqs(2), a(10), b(10), c(4), d(4), e(5)
  double precision :: x(3), y(3)
  integer, allocatable :: sc(:), sd(:), rc(:), rd(:), sbuf(:), rbuf(:)
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, r, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)
  right = mod(r + 1, n)
  left = mod(r - 1 + n, n)
  a = r
  call MPI_Irecv(b, 10, MPI_INTEGER, left, 7, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 10, MPI_INTEGER, right, 7, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, ierr)
  x = 1.0d0
  if (mod(r, 2) == 0) then
    call MPI_Send(x, 3, MPI_DOUBLE_PRECISION, right, 8, MPI_COMM_WORLD, ierr)
    call MPI_Recv(y, 3, MPI_DOUBLE_PRECISION, left, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  else
    call MPI_Recv(y, 3, MPI_DOUBLE_PRECISION, left, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    call MPI_Send(x, 3, MPI_DOUBLE_PRECISION, right, 8, MPI_COMM_WORLD, ierr)
  end if
  c = 1
  call bandela_caliper(3, 0)
  call MPI_Allreduce(c, d, 4, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call bandela_caliper(0, 0)
  call MPI_Bcast(e, 5, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  allocate(sc(n), sd(n), rc(n), rd(n), sbuf(n * n * 2 + 2), rbuf(n * n * 2 + 2))
  do i = 1, n
    sc(i) = r + 1
    sd(i) = (i - 1) * n
    rc(i) = i
    rd(i) = (i - 1) * n
  end do
  call MPI_Alltoallv(sbuf, sc, sd, MPI_INTEGER, rbuf, rc, rd, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call MPI_Finalize(ierr)
end program fortran_test
